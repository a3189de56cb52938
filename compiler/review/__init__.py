"""The review stage: the plan checked against the model, the machine and the libraries."""
