#!/usr/bin/python3
"""torchrun for torch 1.13 on Python 3.11.

torch 1.13's Std.from_str() finds the flag by iterating over the Std IntFlag; since Python 3.11
iteration yields only single-bit members, so "0" (NONE) and "3" (ALL) map to None and torchrun
dies with "'NoneType' object has no attribute 'get'". This wrapper replaces from_str with a
direct value lookup and then runs torchrun's own main() with the same arguments.
"""
import re
import sys

from torch.distributed.elastic.multiprocessing import api


def _std_from_str(cls, vm):
    if re.match(api._VALUE_REGEX, vm):
        return cls(int(vm))
    if re.match(api._MAPPING_REGEX, vm):
        return {int(i): cls(int(v)) for i, v in (m.split(":") for m in vm.split(","))}
    raise ValueError(f"{vm} does not match: <{api._VALUE_REGEX}> or <{api._MAPPING_REGEX}>")


api.Std.from_str = classmethod(_std_from_str)

from torch.distributed.run import main  # noqa: E402  (after the patch, on purpose)

if __name__ == "__main__":
    sys.exit(main())
