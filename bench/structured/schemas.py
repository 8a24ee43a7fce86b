"""JSON schemas for the structured-output benchmark: each with a document it allows and, for the
coverage check, a document that breaks exactly the keyword under test."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["COVERAGE", "TIMED", "SchemaCase"]


@dataclass(frozen=True)
class SchemaCase:
    name: str
    schema: dict[str, Any] | None
    """None: any JSON object (``json_object``)."""
    valid: str
    invalid: str = ""
    """Empty: nothing to reject (timing-only cases)."""


_PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
_ORDER = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "status": {"enum": ["pending", "paid", "shipped"]},
        "customer": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "email": {"type": "string"}},
            "required": ["name", "email"],
            "additionalProperties": False,
        },
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "sku": {"type": "string"},
                    "qty": {"type": "integer"},
                    "price": {"type": "number"},
                },
                "required": ["sku", "qty", "price"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["id", "status", "customer", "items"],
    "additionalProperties": False,
}
_REFS = {
    "$defs": {
        "money": {
            "type": "object",
            "properties": {
                "amount": {"type": "number"},
                "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
            },
            "required": ["amount", "currency"],
            "additionalProperties": False,
        },
        "party": {
            "anyOf": [
                {"type": "string"},
                {
                    "type": "object",
                    "properties": {"iban": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{2}[A-Z0-9]{8,20}$"}},
                    "required": ["iban"],
                    "additionalProperties": False,
                },
            ]
        },
    },
    "type": "object",
    "properties": {
        "payer": {"$ref": "#/$defs/party"},
        "payee": {"$ref": "#/$defs/party"},
        "total": {"$ref": "#/$defs/money"},
        "priority": {"type": "integer", "minimum": 1, "maximum": 5},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
    },
    "required": ["payer", "payee", "total", "priority", "tags"],
    "additionalProperties": False,
}

TIMED = [
    SchemaCase("json_object", None, '{"answer":"forty-two","confidence":0.93,"sources":["a","b"]}'),
    SchemaCase("flat", _PERSON, '{"name":"Ada Lovelace","age":36}'),
    SchemaCase(
        "nested_array_enum",
        _ORDER,
        '{"id":"A-1009","status":"paid","customer":{"name":"Grace Hopper","email":"grace@example.com"},'
        '"items":[{"sku":"X1","qty":2,"price":9.5},{"sku":"Y22","qty":1,"price":120}]}',
    ),
    SchemaCase(
        "refs_anyof_pattern",
        _REFS,
        '{"payer":"ACME Bank","payee":{"iban":"DE89370400440532013000"},'
        '"total":{"amount":1250.75,"currency":"EUR"},"priority":3,"tags":["wire","urgent"]}',
    ),
]

_TREE = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {
                "v": {"type": "integer"},
                "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}},
            },
            "required": ["v", "kids"],
            "additionalProperties": False,
        }
    },
    "$ref": "#/$defs/node",
}

COVERAGE = [
    SchemaCase("nested objects", _ORDER, TIMED[2].valid, TIMED[2].valid.replace('"qty":2', '"qty":"2"')),
    SchemaCase("enum", _ORDER, TIMED[2].valid, TIMED[2].valid.replace('"paid"', '"lost"')),
    SchemaCase("anyOf + $ref", _REFS, TIMED[3].valid, TIMED[3].valid.replace('"ACME Bank"', "7")),
    SchemaCase("pattern", _REFS, TIMED[3].valid, TIMED[3].valid.replace('"EUR"', '"eur"')),
    SchemaCase(
        "minimum/maximum", _REFS, TIMED[3].valid, TIMED[3].valid.replace('"priority":3', '"priority":9')
    ),
    SchemaCase(
        "minItems/maxItems",
        _REFS,
        TIMED[3].valid,
        TIMED[3].valid.replace('["wire","urgent"]', '["a","b","c","d"]'),
    ),
    SchemaCase("recursive $ref", _TREE, '{"v":1,"kids":[{"v":2,"kids":[]}]}', '{"v":1,"kids":[{"v":2}]}'),
    SchemaCase(
        "string min/maxLength",
        {
            "type": "object",
            "properties": {"code": {"type": "string", "minLength": 2, "maxLength": 4}},
            "required": ["code"],
            "additionalProperties": False,
        },
        '{"code":"abc"}',
        '{"code":"abcdef"}',
    ),
    SchemaCase("json_object", None, TIMED[0].valid, '["not","an","object"]'),
]
