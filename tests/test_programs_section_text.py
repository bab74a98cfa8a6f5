"""The programs section crashed the quick nightly (issue 38 audit, i38a): a cell whose returned gradient is
non-finite stores its entries as text ("nan", "inf") and the table formatted them with ``:.4g``. The table's
gradient column now prints both kinds."""
from nsverify.conventions.programs import Cell
from nsverify.sections.programs import gradient_text


def test_a_finite_gradient_is_printed_to_four_digits():
    assert gradient_text([0.5, 1.0, 1 / 3, 0.0]) == "0.5, 1, 0.3333, 0"


def test_a_nonfinite_cell_is_printed_as_stored_not_a_crash():
    cell = Cell("p", "float16", "cpu", "inductor", ["nan", "inf", "-inf"], "nonfinite", "no")
    assert gradient_text(cell.gradient) == "nan, inf, -inf"


def test_only_the_first_six_entries_are_shown():
    assert gradient_text([float(i) for i in range(10)]) == "0, 1, 2, 3, 4, 5"
