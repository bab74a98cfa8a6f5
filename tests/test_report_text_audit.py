"""Report text fixes from the issue 38 audit (i38a). The programs section crashed the quick nightly: a cell whose
returned gradient is non-finite stores its entries as text ("nan", "inf"), and the table formatted them with
``:.4g``; the table's gradient column now prints both kinds."""
from nsverify.conventions.programs import Cell
from nsverify.sections.programs import gradient_text


def test_a_finite_gradient_is_printed_to_four_digits():
    assert gradient_text([0.5, 1.0, 1 / 3, 0.0]) == "0.5, 1, 0.3333, 0"


def test_a_nonfinite_cell_is_printed_as_stored_not_a_crash():
    cell = Cell("p", "float16", "cpu", "inductor", ["nan", "inf", "-inf"], "nonfinite", "no")
    assert gradient_text(cell.gradient) == "nan, inf, -inf"


def test_only_the_first_six_entries_are_shown():
    assert gradient_text([float(i) for i in range(10)]) == "0, 1, 2, 3, 4, 5"


def test_the_cuda_claim_names_the_cpu_rows_it_compares_with():
    """Issue 38 audit (i38a): the CUDA-equals-CPU claim's measured text named the GPU run's torch but not the CPU
    rows it was compared with; a release change (this run's torch) could pass for a device difference."""
    from nsverify.conventions.claims import cuda_claim

    c = cuda_claim(12, 188, "NVIDIA H200", "2.11.0+cu130", "the stored run's own CPU rows, torch 2.11.0+cu130")
    assert c["held"] is False and "against the stored run's own CPU rows, torch 2.11.0+cu130" in c["measured"]
    assert cuda_claim(0, 188, "NVIDIA H200", "2.11.0+cu130", "x")["held"] is True
