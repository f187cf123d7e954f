"""What the ``tracking`` section may name, read by the schema (when the config is composed) and by
``tracking.reachable`` (before a run starts), so both refuse the same URIs."""

# The stores an MLflow tracking URI may name: a path (no scheme), file:, SQLite and the other SQL databases
# (``postgresql+psycopg2://``: the part before '+'), an HTTP(S) server, Databricks.
TRACKING_SCHEMES = ("", "file", "sqlite", "postgresql", "mysql", "mssql", "http", "https", "databricks")
