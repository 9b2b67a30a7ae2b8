import pytest

from madbench.data.errors import InputError
from madbench.eval.stats.sequential_record import read_record
from madbench.results import BatchDirs


@pytest.mark.parametrize("damage", [b"\xff\xfe\x00garbage", b'{"pair": ', b"[1, 2]"])
def test_a_damaged_sequential_record_is_an_input_error_naming_it(tmp_path, damage):
    path = BatchDirs(tmp_path).sequential
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(damage)
    with pytest.raises(InputError) as err:
        read_record(tmp_path)
    assert str(path.name) in str(err.value) and "not a sequential record" in str(err.value)
