"""The A/B stage: where the screen could not decide, base and candidate run side by side, steps taking
turns (`runner`); `decision` judges the rounds and `rows` puts the decision into the comparison.
"""
