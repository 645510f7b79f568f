"""Render settings for gym_hil on a CPU (``setup:`` in examples/gym_hil/pick_cube_pixels.yaml).

gym_hil's scene casts shadows; drawn by a software renderer (EGL on llvmpipe, no GPU) they take
0.27 s per 128 x 128 frame, so its camera observation runs at 1.6 steps/s. Without shadows it runs
at 12 steps/s (measured here, docs/CALIBRATION.md). The frames then lack the shadows; everything
else is gym_hil's own.
"""


def no_shadows(env):
    env._model.light_castshadow[:] = 0
