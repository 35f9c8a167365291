"""Form fields for amounts of money people type (the admin, the dashboard).

Django's DecimalField takes "1e3" as 1000 and words its bounds with `str(Decimal)`: a minimum of
0.000000001 reads "Ensure this value is greater than or equal to 1E-9." (issue 33). This field
reads the text with `core.money.parse_amount` (plain digits only) and words every bound, and the
widget's min/max/step, with `core.money.plain`.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from core import money


class AmountField(forms.DecimalField):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # Field.run_validators replaces a validator's message with the field's of the same code.
        if self.min_value is not None:
            self.error_messages["min_value"] = (
                f"Ensure this value is at least {money.plain(Decimal(self.min_value))}."
            )
        if self.max_value is not None:
            self.error_messages["max_value"] = (
                f"Ensure this value is at most {money.plain(Decimal(self.max_value))}."
            )

    def to_python(self, value: Any) -> Decimal | None:
        if isinstance(value, str) and value.strip() not in self.empty_values:
            try:
                money.parse_amount(value)
            except money.ExponentNotation as exc:
                raise ValidationError(str(exc), code="invalid") from None
            except money.MoneyInputError:
                pass  # anything else not a number: Django's own "Enter a number."
        return super().to_python(value)

    def widget_attrs(self, widget: forms.Widget) -> dict[str, Any]:
        attrs = super().widget_attrs(widget)
        for name, bound in (("min", self.min_value), ("max", self.max_value)):
            if name in attrs and bound is not None:
                attrs[name] = money.plain(Decimal(bound))
        if attrs.get("step") not in (None, "any") and self.decimal_places is not None:
            attrs["step"] = money.plain(Decimal(1).scaleb(-self.decimal_places))
        return attrs
