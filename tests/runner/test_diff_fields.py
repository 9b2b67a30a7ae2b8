"""`madbench diff`'s field comparison: a value one side lacks is shown once, whole, never as entries of nothing."""

from madbench.runner.diff import field_diff, lines

JS = {"name": "js_collapse", "threshold": 0.8}


def test_an_empty_list_against_a_list_of_entries_is_one_line_with_both_values():
    d = field_diff({"interventions": [], "rounds": 2}, {"interventions": [JS], "rounds": 2}, "configs.c")
    assert d == [{"field": "configs.c.interventions", "a": [], "b": [JS]}]


def test_a_field_absent_on_one_side_is_one_entry_not_its_entries():
    d = field_diff({"rounds": 2}, {"rounds": 2, "interventions": [JS]}, "configs.c")
    assert d == [{"field": "configs.c.interventions", "a": None, "b": [JS]}]


def test_fields_present_on_both_sides_are_compared_entry_by_entry():
    a = {"interventions": [JS], "pid": {"kp": 0.8, "ki": 0.1}}
    b = {"interventions": [JS | {"threshold": 0.9}, JS], "pid": {"kp": 0.8, "ki": 0.2}}
    assert field_diff(a, b) == [{"field": "interventions[0].threshold", "a": 0.8, "b": 0.9},
                                {"field": "interventions[1]", "a": None, "b": JS},
                                {"field": "pid.ki", "a": 0.1, "b": 0.2}]


def test_a_whole_section_one_side_lacks_lists_the_other_sides_fields():
    assert field_diff(None, {"pack": "abc", "evidence": "def"}) == [
        {"field": "evidence", "a": None, "b": "def"}, {"field": "pack", "a": None, "b": "abc"}]


def test_the_printed_diff_shows_the_none_once():
    d = {"a": "x", "b": "y", "no_provenance": [], "first_request": None, "outcomes": [],
         "config": field_diff({"interventions": []}, {"interventions": None}, "configs.c")}
    printed = lines(d)
    assert "  configs.c.interventions: [] -> None" in printed
    assert not any("interventions[" in line for line in printed)
