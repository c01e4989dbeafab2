"""Issue 48.4: a record id of a numeric id column is accepted by the explain_outlier deployment.

``prefect deployment run 'explain_outlier/explain-outlier' -p record_id=61458`` sends a JSON number; the
server checks it against the deployment's parameter schema (built from the flow's signature, as
``prefect deploy`` does) and the flow run validates it again. Both must accept it, and the flow must see the
roster's text ``"61458"``. Cheap: Prefect's own schema and validation functions, no server.
"""
from __future__ import annotations

import pytest

from flows.explain_outlier import explain_outlier
from flows.params import record_id_text


def _schema():
    from prefect.utilities.callables import parameter_schema

    return parameter_schema(explain_outlier.fn).model_dump_for_openapi()


@pytest.mark.parametrize("value", [61458, "61458", "F000001"])
def test_the_deployment_schema_accepts_a_numeric_or_text_record_id(value):
    from prefect.utilities.schema_tools import validate

    validate({"record_id": value}, _schema(), raise_on_error=True, ignore_required=True)  # raised for 61458 before


@pytest.mark.parametrize("value", [True, 1.5, "", None])
def test_the_deployment_schema_still_refuses_what_is_no_record_id(value):
    from prefect.utilities.schema_tools import ValidationError, validate

    with pytest.raises(ValidationError):
        validate({"record_id": value}, _schema(), raise_on_error=True, ignore_required=True)


def test_the_flow_takes_a_number_as_the_rosters_text():
    params = explain_outlier.validate_parameters({"record_id": 61458})  # what the flow run does with it
    assert record_id_text(params["record_id"]) == "61458"
    assert record_id_text("F000001") == "F000001"
    with pytest.raises(TypeError):
        record_id_text(True)
