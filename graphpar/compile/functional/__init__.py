"""MindSpore 2.x's functional training step, compiled: ``graphpar.jit`` and the program it runs.

A step function (``train_step(data, label)`` calling ``grad_fn = value_and_grad(forward_fn, None, weights)`` and
``optimizer(grads)``) closes over Cells and an optimizer; their Parameters and the optimizer's state become the
step's explicit inputs and outputs, its differentiated function becomes the planned graph, and the whole step is one
program built as ``Model.train``'s is (``compile.runtime.program.TrainProgram``). Inside, top to bottom:
``jit`` (the decorator), ``program`` (the step program), ``capture`` (what a step is made of), ``objective`` (the
planned objective Cell and the lending of the closed-over state to a trace), ``discover`` (the Cells a function
reaches).
"""
