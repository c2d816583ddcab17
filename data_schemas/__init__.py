"""data_schemas: machine-checkable contracts of the datasets that cross boundaries (input data,
fitted model, scores) and the validation that enforces them."""
