"""Command-line interface (`kvcast ...`)."""
