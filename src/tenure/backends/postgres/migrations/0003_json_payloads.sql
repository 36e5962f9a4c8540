-- Arguments, results and progress are stored as json, not jsonb: as the JSON
-- text they were given, read back unchanged (jsonb turned 1e16 into
-- 10000000000000000, 1.0e0 into 1.0 and reordered keys; it refused a string
-- holding \u0000). Nothing queries inside them, and json costs the server less
-- to store and to read back.
ALTER TABLE {schema}.jobs
    ALTER COLUMN args TYPE json USING args::json,
    ALTER COLUMN result TYPE json USING result::json,
    ALTER COLUMN progress TYPE json USING progress::json;
