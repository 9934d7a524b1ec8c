"""Shared check for the PM4 and SDMA decoder tests (no tests here)."""
from __future__ import annotations


def check_round_trip(pkts: list[tuple], decode, fmt) -> list:
  """pkts: (words, name, expected fields) as the encoders emitted them. The stream of all of them decodes back to the
  same packets (names, offsets, words, fields; "_data" is a packet's data) and formats to one line per packet."""
  stream = [w for words, _, _ in pkts for w in words]
  decoded = decode(stream)
  assert [p.name for p in decoded] == [name for _, name, _ in pkts]
  at = 0
  for p, (words, _, want) in zip(decoded, pkts):
    assert p.offset == at and p.words == words and not p.error
    at += len(words)
    for k, v in want.items():
      if k == "_data": assert p.data == v
      else: assert p.fields[k] == v, (p.name, k)
  assert fmt(stream).count("\n") == len(pkts) - 1
  return decoded
