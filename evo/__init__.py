"""The evokernels engine and its command line."""
