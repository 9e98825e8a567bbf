"""BFCL (Berkeley Function Calling Leaderboard): its data files, its AST check, our run."""
