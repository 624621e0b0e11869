"""Results: collect result files into tidy tables, statistics, paper tables (torch-free)."""
