"""A world size across nodes as a Kubeflow Trainer v2 TrainJob: the job's manifest, phase and launch
(job.py, the only module that knows the Trainer's alpha API), the Kubernetes client for TrainJobs and
their pods (client.py), and the pipeline's task body that launches and follows one (task.py)."""
