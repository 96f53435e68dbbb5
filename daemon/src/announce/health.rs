//! Health checks (filled in by step 3).
