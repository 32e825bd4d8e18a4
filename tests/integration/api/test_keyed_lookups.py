"""``shared.db.sql``: key lists as one array parameter (sent in binary), and plans that hold
without statistics.

A table that was never analyzed gives the planner only its size: a list of keys may then look
like a large share of it, and a sequential scan cheaper than the index. Within
``keyed_lookups`` the lookup goes through the index whatever the statistics say.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from psycopg.adapt import PyFormat, Transformer
from psycopg.types.array import ListBinaryDumper
from sqlalchemy import Engine, select, text
from sqlalchemy.orm import Session

from shared.db.migrate import upgrade
from shared.db.models import EventKey
from shared.db.session import make_engine
from shared.db.sql import keyed_lookups, one_of
from tests.conftest import scratch_database

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def unanalyzed() -> Iterator[Engine]:
    """A migrated database whose event_keys table has 300,000 rows and no statistics."""
    with scratch_database() as url:
        upgrade(url)
        engine = make_engine(url)
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO event_keys (event_pk, workspace_id, provider, name, value) "
                    "SELECT g / 3, 'ws_x', 'stripe', 'k' || (g % 3), 'v' || g "
                    "FROM generate_series(1, 300000) g"
                )
            )
        yield engine
        engine.dispose()


def plan(session: Session, pks: list[int]) -> str:
    query = select(EventKey.name).where(one_of(session, EventKey.event_pk, pks))
    compiled = query.compile(session.get_bind())
    rows = session.connection().exec_driver_sql(f"EXPLAIN {compiled}", compiled.params)
    return "\n".join(row[0] for row in rows)


def test_a_key_list_is_one_array_parameter(unanalyzed: Engine) -> None:
    with Session(unanalyzed) as session:
        for size in (1, 5, 256):
            query = select(EventKey.name).where(one_of(session, EventKey.event_pk, range(size)))
            assert "= ANY (" in str(query.compile(unanalyzed))
        found = session.execute(
            select(EventKey.value).where(one_of(session, EventKey.event_pk, [7, 8]))
        ).scalars()
        assert sorted(found) == ["v21", "v22", "v23", "v24", "v25", "v26"]


def test_a_key_list_goes_to_the_server_as_a_binary_array(unanalyzed: Engine) -> None:
    with unanalyzed.connect() as conn:
        driver = conn.connection.driver_connection
        assert driver is not None
        transformer = Transformer(driver)
        for listed in (["a", "b"], [1, 2]):  # (an empty list goes as text, of no type)
            assert isinstance(transformer.get_dumper(listed, PyFormat.AUTO), ListBinaryDumper)
    with Session(unanalyzed) as session:  # typed by the column whatever the list holds
        for pks, found in (([7, 8], 6), ([], 0), ([None], 0), ([2**40, 7], 3)):
            query = select(EventKey.value).where(one_of(session, EventKey.event_pk, pks))
            assert len(session.execute(query).all()) == found


def test_within_keyed_lookups_the_index_serves(unanalyzed: Engine) -> None:
    pks = list(range(50_000, 50_256))
    with Session(unanalyzed) as session, session.begin():
        keyed_lookups(session)
        chosen = plan(session, pks)
        assert "Seq Scan" not in chosen
        assert "pk_event_keys" in chosen
    with Session(unanalyzed) as session, session.begin():  # the settings end with the transaction
        assert session.execute(text("SHOW enable_seqscan")).scalar_one() == "on"
