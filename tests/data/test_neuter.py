"""Entity neutering of blind texts (madbench.data.neuter) and the residue pass (madbench.data.residue)."""

from __future__ import annotations

import re

import pytest

from madbench.data.amounts import bucket_amounts, residue_amounts
from madbench.data.blind import BlindOptions, blind_memo, pack_companies
from madbench.data.generic_words import Document, derive, spread_table
from madbench.data.memo import build_memo
from madbench.data.neuter import MASK, Masker, load_vocabulary, yearless_units
from madbench.data.residue import memo_residue
from madbench.data.scenario import load_scenarios
from tests.conftest import SHARED_MARKET, SHARED_PAPER, requires_shared

# Names invented for this test: no list in the project holds them, so only a general rule can mask them.
HELD_OUT = ("Zentrix", "Quorvan Max 7", "Marlowe Ridge", "Elspeth Varnholt", "Varnholt", "Great Kelp Outage",
            "Operation Tindle", "Brasquell Holdings", "Okavelle Basin", "vexaCloud", "HLX-4")
TEXT = ("Zentrix sales of the Quorvan Max 7 doubled after the launch of vexaCloud. Production at the Marlowe Ridge field "
        "fell when the Great Kelp Outage hit the Okavelle Basin; Elspeth Varnholt, chief executive, said the acquisition "
        "of Brasquell Holdings closes on June 14. Varnholt expects HLX-4 demand under Operation Tindle to recover by "
        "March, and the pandemic-related costs of the war and the zorvic variant to fade. Total revenue grew 5%.")


def test_invented_names_of_every_kind_are_masked_readably_and_consistently():
    masker = Masker(seed="memo-1")
    out = masker(TEXT)
    assert [n for n in HELD_OUT if n in out] == []
    assert not re.search(r"\bJune\b|\bMarch\b|\bpandemic\b|\bwar\b|\bzorvic\b", out)
    classes = {t.text: t.mask_class for t in masker.masked}
    assert classes["Elspeth Varnholt"] == "PERSON" and classes["Brasquell Holdings"] == "COMPANY"
    assert classes["Okavelle Basin"] == "PLACE" and classes["Great Kelp Outage"] == "EVENT"
    assert classes["Quorvan Max 7"] == "PRODUCT" and classes["vexaCloud"] == "PRODUCT"
    person = next(t.mask for t in masker.masked if t.text == "Elspeth Varnholt")
    assert out.count(person) == 2  # the surname alone later is the same person
    assert "[DATE]" in out and "[MONTH]" in out and out.endswith("Total revenue grew 5%.")  # ordinary words stay
    assert masker(TEXT) == out  # idempotent per memo: the same name, the same mask


def test_masks_differ_across_memos_and_repeat_within_one():
    text = "Zentrix grew. Zentrix shrank. Quorvan fell. Tindle rose."
    a, b = Masker(seed="memo-1")(text), Masker(seed="memo-2")(text)
    assert a.split()[0] == a.split()[2] and MASK.fullmatch(a.split()[0])
    assert a != b  # the numbers are drawn per memo


def test_generic_words_acronyms_and_blind_tokens_stay():
    masker = Masker(seed="m")
    text = "Non-GAAP EPS rose 4% in Q4 FY0 and ASSET_B's R&D grew at t\u221220d; the Board raised the dividend in Q\u22121."
    assert masker(text) == text and masker.masked == []


def test_years_leave_index_bases_and_real_dollar_units():
    assert yearless_units("Industrial production index (2017=100)") == "Industrial production index (base=100)"
    assert yearless_units("GDP in chained 2012 dollars") == "GDP in constant dollars"


def test_the_vocabulary_keeps_ordinary_sentence_heads_and_nothing_brand_like():
    v = load_vocabulary()
    assert v.allows("Total", initial=True) and not v.allows("Total", initial=False)
    assert not v.allows("Azure", initial=True) and v.allows("GAAP", initial=False)


@requires_shared
@pytest.mark.slow
def test_residue_of_the_paper_memos_is_nothing():
    """35 paper scenarios with the paper's filings and calls, blind with the defaults: no name, year, month, exact
    macro level, lower-case term or exact amount left (the review checks more than this pass; this is its floor).
    A few minutes: slow."""
    from madbench.data.market.pack import load_pack
    pack = load_pack(SHARED_MARKET, [SHARED_PAPER])
    companies = pack_companies(pack.universe)
    totals: dict[str, int] = {}
    for scenario in load_scenarios(SHARED_PAPER / "scenarios_35.yaml"):
        memo = blind_memo(build_memo(scenario, pack), scenario, companies, BlindOptions()).memo
        for kind, n in memo_residue(memo).counts.items():
            totals[kind] = totals.get(kind, 0) + n
    assert totals == {"name": 0, "year": 0, "month": 0, "exact_level": 0, "term": 0, "amount": 0, "fiscal_label": 0,
                      "percent": 0, "fused_name": 0}


def test_accented_full_width_and_nonbreaking_forms_of_a_name_leave_no_letters_behind():
    out = Masker(seed="memo-u")("Zürvik bought Société Quelvanne; Ｚｅｎｔｒｉｘ shipped the Ｑ7 and the HLX\u20114\u00a0Max 9.")
    assert re.sub(r"\[[A-Z]+_\d+\]|[a-z ;.]", "", out) == "", out


def test_a_drug_named_by_its_nonproprietary_stem_is_masked_in_lower_case():
    masker = Masker(seed="memo-d")
    out = masker("Sales of velquatide and norvizumab continued; vexotinibs too. A peptide supply and consumer demand rose.")
    assert not re.search(r"velquatide|norvizumab|vexotinib", out), out
    classes = {t.text: t.mask_class for t in masker.masked}
    assert {classes[d] for d in ("velquatide", "norvizumab", "vexotinib")} == {"PRODUCT"}
    # a word with the stem's ending but no drug's length is no drug (a pharma word all the same: a term)
    assert classes.get("peptide") != "PRODUCT" and out.endswith("supply and consumer demand rose.")


# -- lower-case terms ---------------------------------------------------------------------------------------------

# Words invented for this test: the evidence never wrote them, so no vocabulary drawn from it can hold them.
UNSEEN = ("zorbleflux", "quintaverse", "plimmering")


def test_lower_case_words_never_seen_are_masked_as_terms_and_generic_words_stay():
    masker = Masker(seed="memo-t")
    text = ("Demand for zorbleflux hardware rose, and zorbleflux-based tools in the quintaverse grew; plimmering "
            "costs fell. Total revenue increased 5% and operating margins expanded.")
    out = masker(text)
    assert not [w for w in UNSEEN if w in out], out
    terms = {t.text: t.mask for t in masker.masked if t.mask_class == "TERM"}
    assert set(terms) == set(UNSEEN)
    assert out.count(terms["zorbleflux"]) == 2 and f"{terms['zorbleflux']}-based" in out  # one word, one mask
    assert out.endswith("Total revenue increased 5% and operating margins expanded.")  # generic words stay
    other = Masker(seed="memo-u")
    other(text)
    assert {t.text: t.mask for t in other.masked if t.mask_class == "TERM"} != terms  # numbered per memo


@pytest.mark.parametrize("word", ["bitcoin", "metaverse", "generative", "vaccine", "vaccines", "reopening", "tariffs",
                                  "hyperscale", "datacenter", "smartphones"])
def test_a_firms_or_an_eras_word_is_not_generic(word):
    """Words the evidence writes, of one company or a few ("metaverse", "hyperscale") or of one period ("reopening",
    "tariffs", "generative"): the rule that draws the vocabulary leaves them out, in any case and at a sentence's head."""
    masker = Masker(seed="memo-e")
    out = masker(f"{word.capitalize()} sales rose. Sales of {word} products rose.")
    assert word not in out.lower(), out
    assert not load_vocabulary().allows(word.capitalize(), initial=True)


def test_madbench_notes_are_masked_of_names_only():
    masker = Masker(seed="memo-n")
    note = "call dated t\u221266d by its zorbleflux filing; Zentrix"
    assert masker(note, terms=False) == "call dated t\u221266d by its zorbleflux filing; " + masker.masked[0].mask


def test_the_rule_keeps_words_spread_over_firms_and_years_and_drops_the_rest():
    """Eight companies over four years: a word all of them write every year is generic; one written only in the last
    two years (an era's), one written by three companies (theirs) and one too rare to measure are not."""
    docs = []
    for year in (2021, 2022, 2023, 2024):
        for f in range(8):
            words = ["steady"]
            if year >= 2023:
                words.append("faddish")
            if f < 3:
                words.append("ownword")
            if f == 0 and year == 2021:
                words.append("rareword")
            docs.append(Document(f"F{f}", "filings", year, " ".join(words) + " grew."))
    table = spread_table(docs, min_cell=5).set_index("word")
    assert table.loc["steady", "variation"] == pytest.approx(0.0) and table.loc["faddish", "variation"] > 0.5
    assert derive(table.reset_index(), min_firms=6, min_documents=10, max_variation=0.5) == ["grew", "steady"]


@requires_shared
@pytest.mark.slow
def test_the_shipped_vocabulary_is_what_the_rule_draws_from_the_evidence(tmp_path):
    """``configs/blind_vocabulary.yaml`` is reproducible: the rule, run again on the market pack and the paper's
    evidence, draws the same words (about half a minute)."""
    import shutil

    from madbench.data.generic_words import main
    from madbench.data.neuter import VOCABULARY_FILE
    copy = tmp_path / "vocabulary.yaml"
    shutil.copy(VOCABULARY_FILE, copy)
    args = ["--pack", str(SHARED_MARKET), "--evidence", str(SHARED_PAPER), "--out", str(copy)]
    assert main([*args, "--check"]) == 0
    assert main([*args, "--max-variation", "5", "--check"]) == 1  # a looser rule draws other words


# -- amounts ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("revenue of $394.3 billion", "revenue of $[100\u20131000 billion]"),
    ("a dividend of $0.23 per share", "a dividend of $[0.1\u20131] per share"),
    ("opex of $12.9-13.1 billion", "opex of $[10\u2013100 billion]"),
    ("$999 million to $1.2 billion", "$[100\u201310000 million]"),
    ("bought back $2.5B and EUR 500 million", "bought back $[1\u201310 billion] and EUR [100\u20131000 million]"),
    ("8.3 billion euros", "[1\u201310 billion] euros"),
    ("41.9 million shares and 12,000 employees", "[10\u2013100 million] shares and [10\u2013100 thousand] employees"),
    ("margin 43.3%, up 150 basis points, 3x, growth of 1,200%", "margin 43.3%, up 150 basis points, 3x, growth of 1,200%"),
    ("at t\u221220d, Q4 FY0, $5 M&A", "at t\u221220d, Q4 FY0, $[1\u201310] M&A"),
])
def test_absolute_amounts_become_orders_of_magnitude_and_relative_figures_stay(text, expected):
    out = bucket_amounts(text)
    assert out == expected and bucket_amounts(out) == out and list(residue_amounts(out)) == []


def test_the_masker_buckets_amounts_and_masks_nothing_of_a_bucket():
    masker = Masker(seed="memo-a")
    out = masker("Net sales rose to $394.3 billion as 1.2 billion shares were repurchased.")
    assert out == "Net sales rose to $[100\u20131000 billion] as [1\u201310 billion] shares were repurchased."
    assert masker.masked == []


def test_the_residue_counts_terms_and_exact_amounts_the_masking_left(make_pack, monkeypatch):
    """A blind memo whose texts were not masked keeps "zorbleflux" and "$394.3 billion": the residue pass counts
    them; masked, it counts nothing."""
    import madbench.data.blind as blind
    from tests.data.test_blind import blind_world

    pack, scenario = blind_world(make_pack)
    memo = build_memo(scenario, pack)
    fact = "Zorbleflux sales reached $394.3 billion as zorbleflux demand grew."
    memo.sections[-1].items[-1] = memo.sections[-1].items[-1].model_copy(update={"value": fact, "unit": "text"})
    companies = pack_companies(pack.universe)
    masked = memo_residue(blind_memo(memo, scenario, companies, BlindOptions()).memo)
    assert masked.total == 0, masked.examples

    class Unmasked(blind.Masker):
        def __call__(self, text: str, terms: bool = True) -> str:
            return text

    monkeypatch.setattr(blind, "Masker", Unmasked)
    monkeypatch.setattr(blind, "bucket_amounts", lambda text: text)
    left = memo_residue(blind_memo(memo, scenario, companies, BlindOptions()).memo)
    assert "zorbleflux" in left.examples["term"] and "Zorbleflux" in left.examples["name"]
    assert left.counts["amount"] >= 1 and "$394.3 billion" in left.examples["amount"]
