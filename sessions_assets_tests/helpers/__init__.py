"""What the tests share: the oracle (``reference``), the scenarios and streams they draw, and the means to run the
deployed paths (``deployed``) and read what a Spark server did (``spark_ui``)."""
