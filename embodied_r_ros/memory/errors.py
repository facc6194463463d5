"""The one error type of the memory layer: a machine-readable code and a one-line message.

Callers (the query server, the CLI) map the code to their own error reply; the message is meant
for a person and never spans lines. No code path that raises it deletes or rewrites stored rows.
"""

from __future__ import annotations

#: a time phrase in the question or its options that cannot be read
BAD_TIME_PHRASE = "BAD_TIME_PHRASE"
#: a lookup's request that cannot be answered as asked (words naming no object, bad stamps)
BAD_REQUEST = "BAD_REQUEST"
#: a reader was pointed at a database file that does not exist
DB_MISSING = "DB_MISSING"
#: the file is not a memory database, or is damaged
DB_CORRUPT = "DB_CORRUPT"
#: the database was written by another schema version of this layer
SCHEMA_MISMATCH = "SCHEMA_MISMATCH"
#: another writer holds the store (one writer per file, or per robot on a server)
WRITER_BUSY = "WRITER_BUSY"
#: a write on a store opened for reading
READ_ONLY = "READ_ONLY"
#: a row that cannot be stored (non-finite stamp, empty robot name, ...)
BAD_ROW = "BAD_ROW"
#: the database server cannot be reached or refused the connection
DB_UNAVAILABLE = "DB_UNAVAILABLE"
#: the text-embedding model is missing, or its weights are not the pinned ones
EMBEDDER_UNAVAILABLE = "EMBEDDER_UNAVAILABLE"


class SpatialMemoryError(Exception):
    """A memory operation that cannot be done; ``code`` is one of this module's constants."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(" ".join(str(message).split()))
        self.code = code

    def __str__(self) -> str:
        return f"{self.code}: {self.args[0]}"
