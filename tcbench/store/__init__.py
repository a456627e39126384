"""Where results are kept: the Store API over SQLite or PostgreSQL, and history (stored rows back to results)."""
