"""`gpuledger ui`: a read-only web dashboard over the DuckDB projection (server-rendered HTML
and inline SVG, no asset from outside the package)."""
