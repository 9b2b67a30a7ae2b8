"""Statistics over `runs.parquet`: summaries, paired tests, paper-style tables, correlations, OLS, power.

Every test comes from scipy or statsmodels; these modules only pair the rows,
choose the test and shape the output.
"""
