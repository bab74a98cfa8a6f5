"""``nsverify costs`` subcommands."""
import json

from nsverify.cli import main


def test_tables_failures_json(capsys):
    assert main(["costs", "tables", "--failures", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and {r["column"] for r in rows} == {"l_1 norm", "l_inf norm"}


def test_sat_reports_both_sets(capsys):
    assert main(["costs", "sat", "--vars", "3", "--clauses", "1"]) == 0
    out = capsys.readouterr().out
    assert "Proposition 4: D^a(0) non-singleton = True" in out and "!= {0}: True" in out


def test_bad_arguments_exit_2_with_a_message(capsys):
    assert main(["costs", "sat", "--vars", "0"]) == 2
    assert "--vars: 0 is invalid: give an integer >= 1" in capsys.readouterr().err
    assert main(["costs", "ratio", "--dtype", "int8"]) == 2
    assert "not a floating dtype" in capsys.readouterr().err
    assert main(["costs", "ratio", "--device", "cuda:7"]) == 2
