from filters.checksum import credit_code_valid, iban_valid, luhn_valid, resident_id_check, resident_id_valid


def test_luhn_accepts_known_cards_and_rejects_one_digit_off() -> None:
    assert luhn_valid("4111111111111111")
    assert luhn_valid("6222021234567890128")
    assert not luhn_valid("4111111111111112")
    assert not luhn_valid("6222021234567890127")


def test_resident_id_mod_11_2_including_x() -> None:
    # GB 11643 sample: 11010519491231002X.
    assert resident_id_check("11010519491231002") == "x"
    assert resident_id_valid("11010519491231002x")
    assert resident_id_valid("440524188001010014")
    assert not resident_id_valid("440524188001010015")
    assert not resident_id_valid("44052418800101001")


def test_credit_code_mod_31() -> None:
    assert credit_code_valid("91350100m000100y43")
    assert not credit_code_valid("91350100m000100y44")
    assert not credit_code_valid("91350100m000100i43")  # I is not in the alphabet


def test_iban_mod_97() -> None:
    assert iban_valid("DE89370400440532013000")
    assert iban_valid("gb82west12345698765432")
    assert not iban_valid("DE89370400440532013001")
