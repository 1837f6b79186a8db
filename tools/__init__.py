"""Developer tools (README generation); not imported by the library."""
