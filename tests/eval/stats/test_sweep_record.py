import pytest

from madbench.data.errors import InputError
from madbench.eval.stats.sweep_record import path_of, read_record


@pytest.mark.parametrize("damage", [b"\xff\xfe\x00garbage", b'{"control": "c", "arms": [', b"", b"[1, 2]"])
def test_a_damaged_sweep_record_is_an_input_error_naming_it(tmp_path, damage):
    path = path_of(tmp_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(damage)
    with pytest.raises(InputError) as err:
        read_record(tmp_path)
    assert "sweep.json" in str(err.value) and "not a sweep record" in str(err.value)
