"""PostgreSQL plumbing: schema, pool, embedded server, error translation."""
