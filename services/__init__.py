"""What the API does, a module per concept, between its routes (HTTP) and its queries (SQL): routes
call services; services start workflows, run activities' shared code and run the queries."""
