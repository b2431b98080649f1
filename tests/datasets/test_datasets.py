import numpy as np

import bayesvm


def test_toenail_matches_its_documentation():
    df = bayesvm.datasets.load_toenail()
    assert df.shape == (1908, 5)
    assert df["patientID"].nunique() == 294
    assert df["outcome"].value_counts()["moderate or severe"] == 408
    assert list(df["outcome"].cat.categories) == ["none or mild", "moderate or severe"]
    np.testing.assert_allclose(df["time"].mean(), 4.691112568, rtol=1e-8)
    np.testing.assert_allclose(df["visit"].std(), 2.00621123, rtol=1e-8)


def test_spam_and_acath():
    spam = bayesvm.datasets.load_spam()
    assert spam.shape == (4601, 58) and (spam["type"] == "spam").sum() == 1813
    acath = bayesvm.datasets.load_acath()
    assert acath.shape == (3504, 6)
    assert acath["choleste"].isna().sum() == 1246 and acath["tvdlm"].isna().sum() == 3


def test_loaders_return_fresh_frames():
    a = bayesvm.datasets.load_toenail()
    a.loc[0, "visit"] = 99
    assert bayesvm.datasets.load_toenail().loc[0, "visit"] == 1
