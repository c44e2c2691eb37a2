"""Model layer: format-agnostic descriptions of what a log directory holds (runs, hosts,
modules), built from storage listings and format readers."""
