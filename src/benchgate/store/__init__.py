"""The directory stores on disk: the baseline store (one baseline per machine profile and workload,
versioned) and the spool of runs not yet logged to MLflow. They never import tracking: MLflow reads
and fills them, not the other way round.
"""
