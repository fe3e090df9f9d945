"""Post-optimizations: layout clean-up, epilogue fusion, weight preprocessing."""
