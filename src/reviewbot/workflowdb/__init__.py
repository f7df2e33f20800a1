"""The workflow database: managed migrations, read-only queries, DML-only mutations."""
