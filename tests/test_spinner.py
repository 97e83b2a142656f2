"""While compiling, the command line shows a spinner with the elapsed time (on a terminal only)."""

from __future__ import annotations

import io
import time

import pytest

from fusedrl import progress


@pytest.mark.timeout(60)
def test_spinner_shows_the_phase_and_its_elapsed_time():
    out = io.StringIO()
    with progress.spinner("compiling", out, force_terminal=True):
        time.sleep(1.4)
    text = out.getvalue()
    assert "compiling ..." in text and "compiling ... 1 s" in text, text


def test_spinner_writes_nothing_where_no_terminal_reads_it():
    out = io.StringIO()
    with progress.spinner("compiling", out):
        time.sleep(0.1)
    assert out.getvalue() == ""


@pytest.mark.timeout(60)
def test_hold_interrupt_spins_while_compiling_once_turned_on():
    previous = progress.show_spinner(True, force_terminal=True)
    try:
        shown, other, off = io.StringIO(), io.StringIO(), io.StringIO()
        with progress.hold_interrupt("compiling", shown):
            time.sleep(0.3)
        with progress.hold_interrupt("saving the checkpoint", other):  # not a compile: no spinner
            time.sleep(0.3)
        progress.show_spinner(False)
        with progress.hold_interrupt("compiling", off):
            time.sleep(0.3)
    finally:
        progress.restore_spinner(previous)
    assert "compiling ..." in shown.getvalue()
    assert other.getvalue() == "" and off.getvalue() == ""
