"""Device groups of collectives in every spelling XLA prints, read from real HLO text (XLA 0.10 CPU compiles of
small shard_map / jit programs on 8 devices), async pairs counted once, and unknown spellings refused."""

import pytest

from graphpar.dump.hlo import HloGroupsError, parse_collectives, parse_groups, wire_bytes

# shard_map psum over 'b' of a (2, 4) mesh: explicit lists
EXPLICIT = ('ROOT %psum.7 = f32[4,2]{1,0} all-reduce(%param.1), channel_id=1, replica_groups={{0,1,2,3},{4,5,6,7}}, '
            'use_global_device_ids=true, to_apply=%region_0.0, metadata={op_name="jit(<lambda>)/shard_map/psum" '
            'stack_frame_id=5}')
# jit of (x @ w) constrained replicated, x split ('a', 'b'), w split ('b', None): iota with a transpose
IOTA_T = ('%all-gather = f32[8,2]{1,0} all-gather(%param), channel_id=1, replica_groups=[4,2]<=[2,4]T(1,0), '
          'dimensions={0}, use_global_device_ids=true, metadata={op_name="jit(<lambda>)/dot_general" '
          'stack_frame_id=3}')
# the same program's reduction: Shardy's mesh spelling
MESH = ("ROOT %all-reduce = f32[8,8]{1,0} all-reduce(%ynn_fusion), channel_id=2, replica_groups=mesh['axis_0'=2,"
        "'axis_1'=4] {'axis_1'}, use_global_device_ids=true, to_apply=%add.clone, metadata={op_name="
        '"jit(<lambda>)/dot_general" stack_frame_id=3}')
# a (2, 4) -> transposed resharding: a sub-axis of a reordered mesh
MESH_DEVICE_IDS = ("%all-to-all.1 = (f32[1,2,2]{2,1,0}, f32[1,2,2]{2,1,0}) all-to-all(%slice_bitcast_fusion, "
                   "%bitcast_slice_fusion), channel_id=1, replica_groups=mesh['axis_0'=4,'axis_1'=2], "
                   "device_ids=([2,2,2]T(0,2,1)) {'axis_0':(2)2}, metadata={op_name=\"jit(<lambda>)/mul\"}")
PERMUTE = ('ROOT %ppermute.3 = f32[4,2]{1,0} collective-permute(%param.1), channel_id=1, source_target_pairs='
           '{{0,1},{1,2},{2,3},{3,0},{4,5},{5,6},{6,7},{7,4}}, metadata={op_name="jit(<lambda>)/shard_map/ppermute"}')


def test_explicit_groups():
    assert parse_groups(EXPLICIT, 8) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_iota_groups_with_and_without_transpose():
    assert parse_groups(IOTA_T, 8) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert parse_groups(IOTA_T.replace("[4,2]<=[2,4]T(1,0)", "[2,4]<=[8]"), 8) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_mesh_groups():
    assert parse_groups(MESH, 8) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert parse_groups(MESH.replace("{'axis_1'}", "{'axis_0'}"), 8) == [[0, 4], [1, 5], [2, 6], [3, 7]]


def test_mesh_groups_with_device_ids_and_sub_axes():
    # device order [[0,2],[1,3],[4,6],[5,7]] on mesh (axis_0=4, axis_1=2); the group runs over axis_0's minor half
    assert parse_groups(MESH_DEVICE_IDS, 8) == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_source_target_pairs():
    assert parse_groups(PERMUTE, 8)[:2] == [[0, 1], [1, 2]]


def test_unknown_spelling_is_an_error_never_all_ranks():
    with pytest.raises(HloGroupsError, match="psum.7.*unknown spelling"):
        parse_groups(EXPLICIT.replace("replica_groups={{0,1,2,3},{4,5,6,7}}", "replica_groups=<0..3>"), 8)
    with pytest.raises(HloGroupsError):
        parse_collectives(MESH.replace("{'axis_1'}", "{'axis_9'}"), 8)


def test_async_pair_counted_once():
    # XLA:GPU's async spellings (start returns operand and result; collective-permute adds u32[] contexts)
    hlo = "\n".join([
        "%all-reduce-start = f32[4,8]{1,0} all-reduce-start(f32[4,8]{1,0} %x), channel_id=1, "
        "replica_groups={{0,1,2,3},{4,5,6,7}}, use_global_device_ids=true, to_apply=%add",
        "%all-reduce-done = f32[4,8]{1,0} all-reduce-done(f32[4,8]{1,0} %all-reduce-start)",
        "%all-gather-start = (f32[4,2]{1,0}, f32[8,2]{1,0}) all-gather-start(f32[4,2]{1,0} %p), channel_id=2, "
        "replica_groups=[4,2]<=[2,4]T(1,0), dimensions={0}, use_global_device_ids=true",
        "%all-gather-done = f32[8,2]{1,0} all-gather-done((f32[4,2]{1,0}, f32[8,2]{1,0}) %all-gather-start)",
        "%collective-permute-start = (f32[4,2]{1,0}, f32[4,2]{1,0}, u32[], u32[]) collective-permute-start("
        "f32[4,2]{1,0} %q), channel_id=3, source_target_pairs={{0,1},{1,0}}",
        "%collective-permute-done = f32[4,2]{1,0} collective-permute-done(%collective-permute-start)",
    ])
    found = parse_collectives(hlo, 8)
    assert [c.kind for c in found] == ["AllReduce", "AllGather", "CollectivePermute"]
    assert [c.nbytes for c in found] == [128, 64, 32]
    assert found[1].group_of(0) == (0, 4)
    assert wire_bytes("AllGather", found[1].nbytes, 2) == 32
