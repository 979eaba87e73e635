"""`get_since` page rules: what a client checks of a page before calling it verified, and
completeness proofs of filtered pages."""
