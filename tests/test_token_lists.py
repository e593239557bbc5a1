"""Where two token lists part: the one home the KV cache, the race's agreement and the numerics pages share."""

from specviz.runtime.protocol import common_prefix, first_difference


def test_two_lists_part_where_their_tokens_first_differ():
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert first_difference([1, 2, 3], [1, 2, 4]) == 2


def test_a_shorter_list_parts_where_it_ends_and_equal_lists_never_part():
    assert common_prefix((1, 2), (1, 2, 3)) == 2
    assert first_difference([1, 2], [1, 2, 3]) == 2
    assert first_difference([1, 2], [1, 2]) is None
    assert first_difference([], []) is None
