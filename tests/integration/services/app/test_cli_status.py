"""``speedtier status``: every tier's queue depths, then each kill switch and whether it is
raised, all of them read from Flipper's table in one statement."""

from __future__ import annotations

from click.testing import CliRunner

from services.app.cli import main
from services.knowledge_sync.families import PAUSE_FLAG as SYNC_FLAG
from services.uploads.families import PAUSE_FLAG as UPLOADS_FLAG
from shared.db.engine import make_engine
from shared.flags import Flags
from tests.flag_reads import flag_reads


def test_status_lists_each_kill_switch_raised_or_not_in_one_read(
    database_url: str, redis_url: str, namespace: str
) -> None:
    # Given the knowledge sync's kill switch raised in Flipper's table, the uploads' not
    engine = make_engine(database_url)
    Flags(engine).set(SYNC_FLAG, True)
    Flags(engine).set(UPLOADS_FLAG, False)
    engine.dispose()
    # When an operator asks for the status
    with flag_reads() as reads:
        result = CliRunner().invoke(
            main,
            ["status"],
            env={
                "SPEEDTIER_ENV": "test",
                "DATABASE_URL": database_url,
                "REDIS_URL": redis_url,
                "SPEEDTIER_REDIS_NAMESPACE": namespace,
            },
        )
    # Then each switch is listed with its state, all read in one statement
    assert result.exit_code == 0, result.output
    assert f"flag {SYNC_FLAG}: PAUSED" in result.output
    assert f"flag {UPLOADS_FLAG}: running" in result.output
    assert len(reads) == 1, reads
