"""Connecting to the run store's database: URLs (and masking their passwords), the SQLite
settings that make it safe for several processes, the store's error type, and statements sent
through the driver's own cursor (:func:`fetch`) with their errors wrapped as SQLAlchemy's."""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterator, Sequence
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, Connection

SQLITE_BUSY_TIMEOUT_S = 30.0

LOCKED_RETRIES = 4

# Execution option that makes the SQLite "begin" listener take the write lock up front.
WRITE_OPTION = "gpu_kpi_write"


class StoreError(Exception):
    """The run store cannot be used: unreachable, bad URL, or a schema newer than this code;
    or (``refused``) it refused a value, which no retry changes.

    The message is one line, and any password from the URL in it is masked.
    """

    def __init__(self, message: str, *, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused


def default_store_url() -> str:
    """``$GPU_KPI_STORE``, else an SQLite file ``runs.db`` in the user's data directory."""
    env = os.environ.get("GPU_KPI_STORE", "").strip()
    if env:
        return env
    from tracker.paths import data_dir

    path = data_dir() / "runs.db"
    return f"sqlite:///{path}"


PING_AFTER_S = 5.0
"""A pooled PostgreSQL connection idle longer than this is pinged before it is handed out (a
server restarted meanwhile would fail the first statement); one used more recently is not
(:func:`ping_if_idle`)."""

_USED = "gpu_kpi_used"


def ping_if_idle(engine: sa.Engine) -> None:
    """Ping ``engine``'s pooled connections before handing one out only when it was idle longer
    than :data:`PING_AFTER_S`, in place of SQLAlchemy's ``pool_pre_ping`` (every checkout): a
    ping costs the client as much as a statement (100 µs), one live write in five of its
    statements, where the heartbeat and the next minute follow the samples within seconds.

    A ping that finds the connection gone has the pool replace it, as ``pool_pre_ping`` does.
    """
    dialect = engine.dialect

    def connected(_dbapi_conn: Any, record: Any) -> None:
        record.info[_USED] = time.monotonic()

    def checkout(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        used = record.info.get(_USED)
        if used is not None and time.monotonic() - used < PING_AFTER_S:
            return
        try:
            dialect.do_ping(dbapi_conn)
        except dialect.loaded_dbapi.Error as e:
            if dialect.is_disconnect(e, dbapi_conn, None):
                # as pool_pre_ping: every connection made before now is replaced
                raise sa_exc.InvalidatePoolError(str(e)) from e
            raise
        record.info[_USED] = time.monotonic()

    def checkin(_dbapi_conn: Any, record: Any) -> None:
        if record is not None:
            record.info[_USED] = time.monotonic()

    sa.event.listen(engine, "connect", connected)
    sa.event.listen(engine, "checkout", checkout)
    sa.event.listen(engine, "checkin", checkin)


def sqlite_on_connect(dbapi_conn: Any, _record: Any) -> None:
    # pysqlite's own transaction handling would BEGIN (deferred) behind our back; turn it off
    # so that sqlite_on_begin decides how each transaction starts.
    dbapi_conn.isolation_level = None
    cursor = dbapi_conn.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        # With WAL, NORMAL is durable across process crashes; only an OS crash may lose the
        # last commits.
        cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()


def sqlite_on_begin(conn: Connection) -> None:
    # A deferred transaction that reads and then writes must upgrade its lock, and SQLite fails
    # such an upgrade at once with "database is locked" instead of waiting. Writers take the
    # write lock at BEGIN, where the busy timeout applies.
    write = conn.get_execution_options().get(WRITE_OPTION, False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def fetch(conn: Connection, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """The rows of ``sql``, a statement that returns rows, sent through the driver's own
    cursor in ``conn``'s transaction.

    For the statements of a live write: SQLAlchemy's work around each statement it sends (an
    execution context, a cursor, a result) cost the client 50 µs a statement, as much as the
    driver's own. psycopg is asked for the rows in binary, the same values as their text read
    at half the CPU (a live write's 250 rows of context: 100 µs less).

    Args:
        conn: A connection in a transaction.
        sql: The statement, its placeholders of the driver's style (``?``, ``%s``).
        params: Their values.

    Returns:
        The rows as the driver gives them.

    Raises:
        sqlalchemy.exc.DBAPIError: The driver's error as SQLAlchemy raises it from a
            statement it sent (``OperationalError`` for the driver's, and so on; ``.orig``
            the driver's own).
    """
    with _wrapped(conn):
        cursor = _cursor(conn)
        if conn.dialect.name == "postgresql":
            cursor.execute(sql, params, binary=True)
        else:
            cursor.execute(sql, params)
        return cast("list[tuple[Any, ...]]", cursor.fetchall())


def send(conn: Connection, sql: str, params: Sequence[Any] = ()) -> None:
    """``sql``, a statement that returns no rows, as :func:`fetch` sends one."""
    with _wrapped(conn):
        _cursor(conn).execute(sql, params)


def fetch_first(conn: Connection, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """The rows of ``sql``, the first statement of ``conn``'s transaction: on PostgreSQL sent
    with the ``BEGIN`` that psycopg would send before it, in one round trip (a statement costs
    the client 45-100 µs of CPU however small); as :func:`fetch` where the transaction has
    begun already, and on SQLite (whose ``BEGIN`` is sent by :func:`sqlite_on_begin`).

    The two go as one query of the simple protocol: ``params`` are written into it as
    literals by psycopg's client-side binding (``ClientCursor.mogrify``), and the rows come
    back as text, loaded by psycopg's own loaders: for a statement of few rows (a run's span
    and its lock). Each statement of the query takes its own snapshot, as two would.

    Args:
        conn: A connection in a transaction (SQLAlchemy's) that has sent nothing yet.
        sql: The statement, its placeholders of the driver's style (``?``, ``%s``).
        params: Their values.

    Returns:
        The rows as the driver gives them (PostgreSQL: the values its text loaders make, the
        same values as the binary ones of :func:`fetch`).

    Raises:
        sqlalchemy.exc.DBAPIError: As :func:`fetch`.
    """
    raw = _fresh(conn)
    if raw is None:
        return fetch(conn, sql, params)
    from psycopg.adapt import Transformer

    with _wrapped(conn):
        result = _simple(raw, f"BEGIN; {_client(conn).mogrify(sql, params)}")
        loader = Transformer(raw)
        loader.set_pgresult(result)
        return cast("list[tuple[Any, ...]]", loader.load_rows(0, result.ntuples, tuple))


def send_last(conn: Connection, sql: str, params: Sequence[Any] = ()) -> None:
    """``sql``, a statement that returns no rows and the last of ``conn``'s transaction: on
    PostgreSQL sent with the ``COMMIT`` in one round trip (:func:`fetch_first`'s way), so that
    SQLAlchemy's commit finds nothing left to send (the transaction's only statement is sent
    alone, the server's transaction of one statement); as :func:`send` on SQLite. Nothing may
    be sent in the transaction after it (it would run in a transaction of its own).

    Raises:
        sqlalchemy.exc.DBAPIError: As :func:`fetch`; the transaction is then not committed.
    """
    if conn.dialect.name != "postgresql" or _plain_begin(conn) is None:
        send(conn, sql, params)
        return
    # the transaction's only statement: alone, in the transaction of its own the server
    # makes it (no BEGIN sent, none to commit)
    commit = "" if _fresh(conn) is not None else "; COMMIT"
    with _wrapped(conn):
        _simple(conn.connection.dbapi_connection, f"{_client(conn).mogrify(sql, params)}{commit}")


def _plain_begin(conn: Connection) -> Any | None:
    """``conn``'s psycopg connection where its transactions start with a plain ``BEGIN`` (no
    isolation level, read-only or deferrable mode of its own) and end with a ``COMMIT``
    (not autocommit); else None."""
    raw: Any = conn.connection.dbapi_connection
    plain = (raw.isolation_level, raw.read_only, raw.deferrable, raw.autocommit)
    return raw if plain == (None, None, None, False) else None


def _fresh(conn: Connection) -> Any | None:
    """``conn``'s psycopg connection where its transaction has sent nothing to the server yet
    (:func:`_plain_begin`); else None (and on SQLite)."""
    if conn.dialect.name != "postgresql" or (raw := _plain_begin(conn)) is None:
        return None
    from psycopg.pq import TransactionStatus

    return raw if raw.pgconn.transaction_status == TransactionStatus.IDLE else None


def _simple(raw: Any, query: str) -> Any:
    """The result of the last statement of ``query`` (several, ``;`` between them), sent
    through libpq's ``PQexec`` (the GIL released while it waits); psycopg's error of the
    first statement that failed (the rest are not run)."""
    from psycopg import errors
    from psycopg.pq import ExecStatus

    result = raw.pgconn.exec_(query.encode(raw.info.encoding))
    if result.status not in (ExecStatus.TUPLES_OK, ExecStatus.COMMAND_OK):
        raise errors.error_from_result(result, encoding=raw.info.encoding)
    return result


_CLIENT = "gpu_kpi_client"


def _client(conn: Connection) -> Any:
    """A psycopg ``ClientCursor`` of ``conn``'s driver connection, for its ``mogrify`` (kept
    as :func:`_cursor` keeps its cursor)."""
    from psycopg import ClientCursor

    pooled = conn.connection
    raw: Any = pooled.dbapi_connection
    kept = pooled.info.get(_CLIENT)
    if kept is None or kept[0] is not raw:
        kept = pooled.info[_CLIENT] = (raw, ClientCursor(raw))
    return kept[1]


def send_many(conn: Connection, sql: str, params: Sequence[Sequence[Any]]) -> None:
    """``sql`` once per parameter set, through the driver's ``executemany`` (as :func:`fetch`;
    psycopg sends them in one pipeline)."""
    with _wrapped(conn):
        _cursor(conn).executemany(sql, params)


@contextlib.contextmanager
def _wrapped(conn: Connection) -> Iterator[None]:
    """The driver's errors raised as SQLAlchemy's (:func:`fetch`)."""
    dialect = conn.dialect
    try:
        yield
    except dialect.loaded_dbapi.Error as e:
        raise sa_exc.DBAPIError.instance(
            None, None, e, dialect.loaded_dbapi.Error, dialect=dialect
        ) from e


_CURSOR = "gpu_kpi_cursor"


def _cursor(conn: Connection) -> Any:
    """The cursor of :func:`fetch`: one per driver connection, kept in the pool's ``info`` for
    that connection (cleared when the pool replaces it), rather than one a statement (10 µs
    each to make and close)."""
    pooled = conn.connection
    raw = pooled.dbapi_connection
    kept = pooled.info.get(_CURSOR)
    if kept is None or kept[0] is not raw:
        kept = pooled.info[_CURSOR] = (raw, raw.cursor())  # type: ignore[union-attr]
    return kept[1]


def is_locked(exc: sa_exc.OperationalError) -> bool:
    message = str(exc.orig).lower()
    return "database is locked" in message or "database is busy" in message


def parse_url(raw: str) -> URL:
    try:
        url = sa.make_url(raw.strip())
    except sa_exc.ArgumentError:
        raise StoreError(f"bad run store URL {mask_text(raw, None)!r}") from None
    backend = url.get_backend_name()
    if backend in ("postgres", "postgresql"):
        if url.drivername in ("postgres", "postgresql"):
            url = url.set(drivername="postgresql+psycopg")
        elif backend == "postgres":
            url = url.set(drivername="postgresql+" + url.get_driver_name())
    elif backend != "sqlite":
        raise StoreError(
            f"unsupported run store URL {mask_url(url)!r}: use sqlite:///PATH or postgresql://…"
        )
    return url


def mask_url(url: URL) -> str:
    """The URL for display: its password, in the user part or as a ``password=`` parameter
    (libpq takes both), shown as ``***``."""
    if "password" in url.query:
        url = url.update_query_dict({"password": "***"})
    return url.render_as_string(hide_password=True)


def url_password(url: URL) -> str | None:
    """The URL's password, from the user part or a ``password=`` parameter."""
    if isinstance(url.password, str):
        return url.password
    value = url.query.get("password")
    return value if isinstance(value, str) else None


_USERINFO = re.compile(r"(://[^:/@\s]*:)[^@\s]*@")
_PASSWORD_PARAM = re.compile(r"([?&]password=)[^&\s'\"]*", re.IGNORECASE)


def mask_text(text: str, password: str | None) -> str:
    """``text`` with URL passwords (``://user:PASSWORD@``, ``?password=PASSWORD``) and
    ``password`` itself masked."""
    text = _USERINFO.sub(r"\1***@", text)
    text = _PASSWORD_PARAM.sub(r"\1***", text)
    # A short password would match inside ordinary words; the URL form above covers it.
    if password and len(password) >= 4:
        text = text.replace(password, "***")
    return text
