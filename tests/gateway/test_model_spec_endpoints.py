"""A model spec's endpoint and key variable are checked where the spec is built, so that every path to one (a batch
file, a routing profile's tier, `--set`, a command's flags) refuses a value no call could use, without repeating it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from madbench.data.errors import format_validation_error
from madbench.gateway.models import ModelSpec
from madbench.gateway.routing_profiles import Deployment

KEY = "sk-proj-abcdef0123456789"


@pytest.mark.parametrize("api_base", ["not a url", "htp:/nowhere", "http://", "//host/v1", "ftp://host/v1",
                                      "http://host:99999/v1", "http://host:port/v1", "http://host /v1", ""])
def test_an_api_base_that_is_no_http_url_with_a_host_is_refused_naming_the_field(api_base):
    for model in (ModelSpec, Deployment):
        with pytest.raises(ValidationError) as caught:
            model(**({"model": "openai/x"} if model is ModelSpec else {}), api_base=api_base)
        assert format_validation_error(caught.value).startswith("api_base: is not an http(s) URL with a host (write e.g.")


@pytest.mark.parametrize("api_base", ["http://127.0.0.1:8000/v1", "https://api.openai.com/v1", "http://gw:4000/v1",
                                      "http://[::1]:8080/v1", "HTTPS://Example.com"])
def test_http_and_https_endpoints_with_a_host_are_kept_as_written(api_base):
    assert ModelSpec(model="openai/x", api_base=api_base).api_base == api_base
    assert Deployment(api_base=api_base).api_base == api_base


def test_the_refusal_of_an_endpoint_does_not_repeat_it_a_key_in_its_query_stays_unprinted():
    with pytest.raises(ValidationError) as caught:
        ModelSpec(model="openai/x", api_base=f"htp://host/v1?key={KEY}")
    assert KEY not in format_validation_error(caught.value)


@pytest.mark.parametrize("value", [KEY, "OPENAI API KEY", "1ABC", "KEY=x", ""])
def test_a_key_variable_that_is_no_variable_name_is_refused_without_repeating_it(value):
    for model in (ModelSpec, Deployment):
        with pytest.raises(ValidationError) as caught:
            model(**({"model": "openai/x"} if model is ModelSpec else {}), api_key_env=value)
        message = format_validation_error(caught.value)
        assert message.startswith("api_key_env: must name an environment variable")
        assert KEY not in message


def test_variable_names_are_kept():
    assert ModelSpec(model="openai/x", api_key_env="MY_OPENAI_KEY_2").api_key_env == "MY_OPENAI_KEY_2"
    assert ModelSpec(model="openai/x", api_key_env="_KEY").api_key_env == "_KEY"
