"""metaltile compiler core."""
