"""Analysis: MLflow runs -> tidy DataFrames -> statistics and seaborn plots -> a report."""
