"""Every SQL statement the API runs, a module per resource.

Routes and views do not write SQL: they call these functions, which take a pool or connection
(a caller holding a transaction passes its connection) and answer records or plain values. The
JSON shapes are built from those records in `api/views.py` and the route modules.
"""

from typing import TypeAlias

import asyncpg

# What a query function reads or writes through: the pool, or a connection holding a transaction.
Conn: TypeAlias = asyncpg.Pool | asyncpg.Connection
