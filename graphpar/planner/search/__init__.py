"""AUTO_PARALLEL's strategy search (search_mode "recursive_programming" / "dynamic_programming").

``candidates`` (what each op may do), ``layers`` (repeated identical layers share one solution), ``problem`` (the
cost-model objective over variables and edges), ``ilp`` (the exact HiGHS solve), ``search_pass`` (the pass),
``settings`` (memory budget, hardware), ``report`` (the dump lines), ``planning`` (plans for device counts this
machine does not have). Submodules are imported where used; importing this package imports nothing heavy.
"""
