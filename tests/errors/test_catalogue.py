"""Every row of the bad-input catalogue (docs/errors.md): the mistake raises the catalogued error class, and the
message names the culprit and what would be valid, in one line."""

import os
import re
from pathlib import Path

import pytest

import graphpar as ms
from tests.errors.catalogue import ROWS

DOC = Path(__file__).resolve().parents[2] / "docs" / "errors.md"
_PLACEMENT = re.compile(r"^(GRAPHPAR_|MS_|OMPI_|PMIX_|SLURM_|RANK_)|^DEVICE_ID$")


@pytest.fixture()
def clean(monkeypatch):
    for name in list(os.environ):
        if _PLACEMENT.match(name):
            monkeypatch.delenv(name)
    yield monkeypatch
    ms.context.reset_context()
    ms.context.reset_auto_parallel_context()
    ms.set_ps_context(enable_ssl=False, config_file_path="", client_password="", server_password="")


def test_the_catalogue_has_at_least_40_rows_with_distinct_ids():
    assert len(ROWS) >= 40
    assert len({r.id for r in ROWS}) == len(ROWS)


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_row(row, tmp_path, clean):
    for name, value in row.env.items():
        clean.setenv(name, value)
    if "RANK_TABLE_FILE" not in row.env:
        clean.delenv("RANK_TABLE_FILE", raising=False)
    with pytest.raises(row.error_class()) as info:
        row.run(tmp_path)
    message = str(info.value)
    for words in row.words:
        assert words in message, f"{row.id}: {words!r} not in {message!r}"
    assert "\n" not in message.strip(), f"{row.id}: the message is not one line: {message!r}"
    assert "Traceback" not in message


def test_docs_list_every_row():
    text = DOC.read_text()
    missing = [r.id for r in ROWS if f"`{r.id}`" not in text]
    assert not missing, f"docs/errors.md lacks rows {missing}; regenerate it: python -m tests.errors.catalogue"
