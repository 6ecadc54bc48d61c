"""Annotations: tp.ListNumpy placeholders and results (one device: lists of one), nested
Tuple/Dict results, Callback of a tuple, mismatched results, BlobDef's surface, dtype
conversion rules on the way in."""
import threading
from typing import Dict, Tuple

import numpy as np
import pytest

import actorflow as flow
import actorflow.typing as tp


def test_list_numpy_in_and_out():
    @flow.global_function()
    def mirrored(x: tp.ListNumpy.Placeholder((2, 3))) -> tp.ListNumpy:
        return flow.math.square(x)

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = mirrored([x])
    assert isinstance(out, list) and len(out) == 1
    np.testing.assert_array_equal(out[0], x * x)
    with pytest.raises(TypeError, match="ListNumpy"):
        mirrored(x)
    with pytest.raises(TypeError, match="ListNumpy"):
        mirrored([x, x])


def test_nested_results_and_callback_of_tuple():
    @flow.global_function()
    def nested(x: tp.Numpy.Placeholder((3,))) -> Tuple[tp.Numpy, Dict[str, tp.Numpy]]:
        return x + 1.0, {"double": x * 2.0, "neg": -x}

    x = np.array([1, 2, 3], np.float32)
    a, d = nested(x)
    np.testing.assert_array_equal(a, x + 1)
    assert sorted(d) == ["double", "neg"]
    np.testing.assert_array_equal(d["neg"], -x)

    @flow.global_function()
    def pair(x: tp.Numpy.Placeholder((3,))) -> tp.Callback[Tuple[tp.Numpy, tp.Numpy]]:
        return x, x * 3.0

    got, done = [], threading.Event()
    pair(x)(lambda result: (got.append(result), done.set()))
    assert done.wait(30)
    assert len(got) == 1 and isinstance(got[0], tuple)
    np.testing.assert_array_equal(got[0][1], x * 3)


def test_result_not_matching_annotation():
    @flow.global_function()
    def says_tuple(x: tp.Numpy.Placeholder((3,))) -> Tuple[tp.Numpy, tp.Numpy]:
        return x

    with pytest.raises(TypeError, match="Tuple"):
        says_tuple(np.ones(3, np.float32))

    @flow.global_function()
    def says_none(x: tp.Numpy.Placeholder((3,))) -> None:
        return x

    with pytest.raises(TypeError, match="None"):
        says_none(np.ones(3, np.float32))

    @flow.global_function()
    def returns_number(x: tp.Numpy.Placeholder((3,))) -> tp.Numpy:
        return 3

    with pytest.raises(TypeError, match="tp.Numpy|Numpy"):
        returns_number(np.ones(3, np.float32))


def test_blob_surface():
    seen = {}

    @flow.global_function()
    def probe(images: tp.Numpy.Placeholder((4, 1, 2, 2), dtype=flow.float)) -> tp.Numpy:
        flat = flow.reshape(images, [images.shape[0], -1], name="flat")
        seen.update(shape=flat.shape, dtype=flat.dtype, name=flat.name, repr=repr(flat))
        return flat

    probe(np.zeros((4, 1, 2, 2), np.float32))
    assert seen["shape"] == (4, 4) and seen["dtype"] == flow.float32 and seen["name"] == "flat"
    assert "flat" in seen["repr"] and "(4, 4)" in seen["repr"] and "float32" in seen["repr"]


def test_dtype_conversion_rules():
    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((2,)), labels: tp.Numpy.Placeholder((2,), dtype=flow.int32)) -> Tuple[tp.Numpy, tp.Numpy]:
        return x, labels

    # same-kind casts convert (float64 -> float32, int64 -> int32), as the seeds rely on
    a, b = job(np.array([0.5, 1.5]), np.array([1, 2], dtype=np.int64))
    assert a.dtype == np.float32 and b.dtype == np.int32
    with pytest.raises(TypeError, match="argument 'labels' must have dtype int32, got float32"):
        job(np.zeros(2, np.float32), np.zeros(2, np.float32))
    # non-contiguous input is fine
    a, _ = job(np.arange(4, dtype=np.float32)[::2], np.zeros(2, np.int32))
    np.testing.assert_array_equal(a, [0, 2])
