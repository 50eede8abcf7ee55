"""Settings that graphpar does not refuse but must not ignore silently: each is said once, naming what happens."""


import numpy as np

import graphpar as ms


def test_device_num_below_the_device_count_names_the_devices_used(notices):
    from graphpar.communication.devices import job_devices

    assert len(job_devices(4)) == 4
    assert "set_auto_parallel_context(device_num=4): training on ranks 0..3 (cpu:0-3) of the 8 devices" in \
        notices.text


def test_tls_files_given_with_ssl_off_are_said_to_be_unused(notices, tmp_path):
    ms.set_ps_context(enable_ssl=False, config_file_path=str(tmp_path / "tls.json"))
    assert "set_ps_context(config_file_path): not used while enable_ssl is False" in notices.text
    ms.set_ps_context(config_file_path="")


def test_numpy_slices_dataset_has_mindspores_signature():
    import graphpar.dataset as ds

    data = ds.NumpySlicesDataset({"x": np.arange(12).reshape(6, 2), "y": list(range(6))}, shuffle=False)
    assert data.get_col_names() == ["x", "y"] and data.get_dataset_size() == 6
    rows = list(data.create_dict_iterator(output_numpy=True))
    assert [int(r["y"]) for r in rows] == list(range(6)) and rows[2]["x"].tolist() == [4, 5]
    shards = [ds.NumpySlicesDataset((np.arange(8),), ["a"], num_shards=2, shard_id=k, shuffle=True)
              for k in range(2)]
    seen = [sorted(int(r[0]) for r in s.create_tuple_iterator(output_numpy=True)) for s in shards]
    assert sorted(seen[0] + seen[1]) == list(range(8)) and len(seen[0]) == 4
    assert ds.NumpySlicesDataset([1.0, 2.0]).get_col_names() == ["column_0"]
