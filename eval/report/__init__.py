"""`madbench report`: a self-contained HTML report of one results directory."""
