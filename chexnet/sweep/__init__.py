"""The old home of a sweep's study, now `programkit.sweep`: only its command line stays here (`__main__.py`)."""
