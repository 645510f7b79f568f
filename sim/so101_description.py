"""A MuJoCo model of the SO-101 arm (TheRobotStudio's ~200 USD 5-DoF arm + gripper, six Feetech
STS3215 servos), built in code with ``mujoco.MjSpec`` from primitive geoms only (no meshes), on a
table with a small cube: its dimensions, limits, servo figures and ``so101_spec()``. Its
kinematics (forward kinematics, the jacobian, the IK and the contract's state) are in
``so101_kinematics.py``; ``So101Sim``, the physics the servos drive, in ``so101_physics.py``.

Kinematics and link inertials come from TheRobotStudio/SO-ARM100,
``Simulation/SO101/so101_new_calib.urdf`` (Copyright TheRobotStudio, Apache License 2.0,
https://github.com/TheRobotStudio/SO-ARM100): the joint origins (xyz, rpy), limits, link masses,
centres of mass and inertia tensors are that file's numbers; the link shapes here are our own
boxes and capsules that follow each link from joint to joint.

Frames:

* world: the table top is the plane z = 0; the arm faces +x. The URDF's base frame faces its -y
  axis, so the base sits yawed by +90 degrees (``BASE_QUAT``) at ``BASE_POS``, which puts the
  shoulder_pan axis on the world z axis.
* site ``tcp``: the URDF's ``gripperframe`` on link gripper, between the fingertips (where the
  jaws meet when closed). Its **-y axis runs along the fingers** (from the wrist to the tips; at
  ``HOME`` it points straight down, so the tcp's +y points up); its +z axis points across the
  jaws from the fixed jaw towards the moving one (the opening direction); its x axis is parallel
  to the moving jaw's pivot axis.
* the gripper joint opens the moving jaw (0 = closed, the jaws touch at their tips; a 2.5 cm cube
  stops it near 0.31 rad, where its pad lies flat on the cube; 1.74 = wide open).

Servos: a position actuator per joint (kp ``SERVO_KP``, force limited to the STS3215's stall
torque) behind a rate limiter (``So101Sim.step`` moves each command toward its target at no more
than ``SERVO_MAX_SPEED_RAD_S``), plus the motor's back-EMF as joint damping (stall torque / no-load
speed), so that a saturated servo tops out at its no-load speed. A joint that gravity helps along
can still run a few percent faster than that, as a back-driven motor does.

Collisions are only what a pick needs: the cube with the table and with both jaw pads (the arm's
other shapes are visual only, so adjacent links never collide).
"""

from __future__ import annotations

import math

import mujoco
import numpy as np

from robot_rl.sim.mujoco_backend import look_at_quat

JOINTS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")
ARM_JOINTS = JOINTS[:5]
LIMITS: dict[str, tuple[float, float]] = {
    "shoulder_pan": (-1.91986, 1.91986),
    "shoulder_lift": (-1.74533, 1.74533),
    "elbow_flex": (-1.69, 1.69),
    "wrist_flex": (-1.65806, 1.65806),
    "wrist_roll": (-2.79253, 2.79253),
    "gripper": (-0.174533, 1.74533),
}
LIMITS_LOW = np.array([LIMITS[j][0] for j in JOINTS])
LIMITS_HIGH = np.array([LIMITS[j][1] for j in JOINTS])
# Feetech STS3215 at 7.4 V: 0.222 s per 60 degrees no-load, 19.5 kg.cm stall torque.
SERVO_MAX_SPEED_RAD_S = math.radians(60.0) / 0.222  # ~4.72 rad/s
SERVO_STALL_TORQUE_NM = 19.5 * 9.80665 / 100.0  # ~1.91 N.m
# Position servo gains (N.m/rad, N.m.s/rad): stiff enough that the arm holds itself against
# gravity to well under 1 mm at the tcp, damped near critically with the rotor armature.
SERVO_KP = 400.0
SERVO_KV = 5.0
SERVO_ARMATURE = 0.02  # kg.m^2: the rotor's inertia seen through the 1:345 gearbox
# The motor's back-EMF, a viscous drag: with its drive saturated at the stall torque a joint tops
# out at the no-load speed (stall - drag * speed = 0), however far behind its command it lags.
JOINT_DAMPING = SERVO_STALL_TORQUE_NM / SERVO_MAX_SPEED_RAD_S  # ~0.41 N.m.s/rad
GRIPPER_OPEN = 1.0
GRIPPER_CLOSED = 0.0

# The arm on the table: the URDF base frame yawed +90 degrees (the URDF's arm faces its -y), placed
# so that the shoulder_pan axis (base-frame xy (0.0207909, -0.0230745)) stands on the world z axis.
BASE_POS = (-0.0230745, -0.0207909, 0.0)
BASE_QUAT = (math.cos(math.pi / 4), 0.0, 0.0, math.sin(math.pi / 4))
TABLE_HALF_SIZE = (0.35, 0.35, 0.02)
TABLE_CENTER = (0.15, 0.0, -0.02)  # top at z = 0
CUBE_SIZE = 0.025  # side, m
CUBE_MASS = 0.02
CUBE_POS = (0.2, 0.0, CUBE_SIZE / 2)
# Where a 2.5 cm cube's centre sits between the open jaws, ready to be pinched, in the tcp frame:
# 1.4 cm from the fixed jaw's face (+z: half the cube and 1.5 mm of clearance), 5 mm up the fingers
# from the tcp (+y), so that the fingertips are 2 mm above the cube's bottom face.
CUBE_IN_TCP = (0.0, 0.005, 0.014)

# HOME: the tcp 20 cm in front of the pan axis and 10 cm above the table, fingers straight down
# (tcp -y = world -z), the jaws opening along world +x (the moving jaw on the far side, the fixed
# jaw towards the base), wrist_roll at its middle, gripper open. Found numerically (damped least
# squares on the full tcp pose from the zero pose) and rounded to 1e-4 rad: its tcp is at
# (0.2000, 0.0000, 0.1000) to 0.1 mm, its finger axis within 0.001 degree of vertical, and its
# rotation matrix [[0, 0, 1], [1, 0, 0], [0, 1, 0]] (tcp x = world y, tcp y = up, tcp z = world x).
HOME = np.array([-0.0019, 0.1315, -0.1094, 1.5487, -0.0019, GRIPPER_OPEN])
# HOME's tcp rotation, exactly: tcp x = world y, tcp y = world z (up), tcp z = world x
HOME_ROTATION = np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
for _constant in (HOME, HOME_ROTATION, LIMITS_LOW, LIMITS_HIGH):
    _constant.setflags(write=False)

# joint -> (parent link, child link, joint origin xyz, joint origin rpy), straight from the URDF
_JOINT_ORIGINS = {
    "shoulder_pan": ("base", "shoulder", (0.0207909, -0.0230745, 0.0948817), (-3.14159, 6.03684e-16, 1.5708)),
    "shoulder_lift": ("shoulder", "upper_arm", (-0.0303992, -0.0182778, -0.0542), (-1.5708, -1.5708, 0.0)),
    "elbow_flex": ("upper_arm", "lower_arm", (-0.11257, -0.028, 0.0), (0.0, 0.0, 1.5708)),
    "wrist_flex": ("lower_arm", "wrist", (-0.1349, 0.0052, 0.0), (0.0, 0.0, -1.5708)),
    "wrist_roll": ("wrist", "gripper", (0.0, -0.0611, 0.0181), (1.5708, -9.38083e-08, 3.14159)),
    "gripper": ("gripper", "moving_jaw", (0.0202, 0.0188, -0.0234), (1.5708, 0.0, 0.0)),
}
TCP_XYZ = (-0.0079, -0.000218121, -0.0981274)  # gripperframe on link gripper
TCP_RPY = (1.5708, 0.0, 1.5708)
# link -> (mass kg, centre of mass, (ixx, iyy, izz, ixy, ixz, iyz)) from the URDF's inertials
_INERTIALS = {
    "base": (0.147, (0.020739, 0.00204287, 0.065966),
             (0.000136117, 0.000114686, 0.000130364, 4.59787e-07, 9.75275e-08, -4.97151e-06)),
    "shoulder": (0.100, (-0.0307604, -1.66727e-05, -0.0252713),
                 (8.3759e-05, 8.10403e-05, 2.39783e-05, 7.55525e-08, -1.16342e-06, 1.54663e-07)),
    "upper_arm": (0.103, (-0.0898471, -0.00838224, 0.0184089),
                  (4.08002e-05, 0.000147318, 0.000142487, -1.97819e-05, -4.03016e-08, 8.97326e-09)),
    "lower_arm": (0.104, (-0.0980701, 0.00324376, 0.0182831),
                  (2.87438e-05, 0.000159844, 0.00014529, 7.41152e-06, 1.26409e-06, -4.90188e-08)),
    "wrist": (0.079, (-0.000103312, -0.0386143, 0.0281156),
              (3.68263e-05, 2.5391e-05, 2.1e-05, 1.7893e-08, -5.28128e-08, 3.6412e-06)),
    "gripper": (0.087, (0.000213627, 0.000245138, -0.025187),
                (2.75087e-05, 4.33657e-05, 3.45059e-05, -3.35241e-07, -5.7352e-06, -5.17847e-08)),
    "moving_jaw": (0.012, (-0.00157495, -0.0300244, 0.0192755),
                   (6.61427e-06, 1.89032e-06, 5.28738e-06, -3.19807e-07, -5.90717e-09, -1.09945e-07)),
}

_PRINTED = (1.0, 0.82, 0.12, 1.0)  # the URDF's "3d_printed" yellow
_SERVO = (0.1, 0.1, 0.1, 1.0)

# Jaw geometry (link gripper frame: fingers along -z, jaws close along -x). The fixed jaw's inner
# face is the plane x = TCP x; the moving jaw's pad touches it at its tip when the gripper is at 0.
_JAW_FACE_X = TCP_XYZ[0]
_JAW_TIP_Z = -0.1035  # lowest point of both jaws (link gripper frame)
_JAW_TOP_Z = -0.036
_JAW_THICK = 0.006
_JAW_WIDTH = 0.022
_PAD_LENGTH = 0.034
# Contacts of the cube, the jaw pads and the table: stiff (a 2 N.m servo squeezes a 20 g cube with
# some 25 N, which MuJoCo's default soft contacts let sink in by centimetres), with torsional
# friction (condim 4) so that a pinched cube does not spin about the axis between the pads.
_GRIP_CONTACT = dict(condim=4, friction=[1.0, 0.01, 0.0001], solref=[0.005, 1.0], solimp=[0.95, 0.99, 0.001, 0.5, 2.0])


def rpy_to_quat(rpy) -> np.ndarray:
    """URDF roll-pitch-yaw (fixed axes, R = Rz(yaw) Ry(pitch) Rx(roll)) as a MuJoCo quaternion wxyz."""
    r, p, y = rpy
    qx = np.array([math.cos(r / 2), math.sin(r / 2), 0.0, 0.0])
    qy = np.array([math.cos(p / 2), 0.0, math.sin(p / 2), 0.0])
    qz = np.array([math.cos(y / 2), 0.0, 0.0, math.sin(y / 2)])
    out = np.zeros(4)
    tmp = np.zeros(4)
    mujoco.mju_mulQuat(tmp, qz, qy)
    mujoco.mju_mulQuat(out, tmp, qx)
    return out


def rotz(a: float) -> np.ndarray:
    """The rotation matrix of ``a`` radians about the z axis."""
    c, s = math.cos(a), math.sin(a)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def _moving_pad():
    """Centre, quaternion and half size of the moving jaw's pad, in the moving_jaw frame.

    The moving_jaw frame: x = gripper x, y = gripper z, z = gripper -y, origin at the pivot. The
    pad's inner tip corner P0 touches the fixed jaw's face at gripper 0; the pad is tilted so that
    it lies flat (parallel to the fixed jaw) where a 2.5 cm cube stops it."""
    pivot = np.array(_JOINT_ORIGINS["gripper"][2])
    radius = -(_JAW_TIP_Z - pivot[2])  # the tip at its lowest, right below the pivot
    # P0 at gripper 0, in the jaw frame: x at the fixed jaw's face
    px = _JAW_FACE_X - pivot[0]
    py = -math.sqrt(radius ** 2 - px ** 2)
    # the angle where P0 is CUBE_SIZE from the fixed jaw: px cos q - py sin q = px + CUBE_SIZE
    # i.e. rho cos(q + phi) = px + CUBE_SIZE, on the root near 0.3 rad
    rho, phi = math.hypot(px, py), math.atan2(py, px)
    q0 = -math.acos((px + CUBE_SIZE) / rho) - phi
    rot = rotz(-q0)
    half = np.array([_JAW_THICK / 2, _PAD_LENGTH / 2, _JAW_WIDTH / 2])
    centre = np.array([px, py, 0.0]) + rot @ np.array([half[0], half[1], 0.0])
    centre[2] = pivot[1]  # centred on gripper y = 0 (the jaw frame's z is gripper -y)
    quat = np.array([math.cos(-q0 / 2), 0.0, 0.0, math.sin(-q0 / 2)])
    return centre, quat, half, q0


def _add_inertial(body, link: str) -> None:
    mass, com, inertia = _INERTIALS[link]
    body.explicitinertial = True
    body.mass = mass
    body.ipos = com
    body.fullinertia = inertia


def _visual(body, gtype, size, pos=None, quat=None, fromto=None, rgba=_PRINTED):
    """A shape that is only seen: it collides with nothing and has no mass (the inertials are the URDF's)."""
    g = body.add_geom(type=gtype, size=size, rgba=rgba, contype=0, conaffinity=0, group=1)
    if fromto is not None:
        g.fromto = fromto
    if pos is not None:
        g.pos = pos
    if quat is not None:
        g.quat = quat
    return g


def so101_spec(cube: bool = True, cameras: bool = True) -> mujoco.MjSpec:
    """The SO-101 on a table (top at z = 0), with a 2.5 cm cube and two cameras if asked."""
    CAP, BOX = mujoco.mjtGeom.mjGEOM_CAPSULE, mujoco.mjtGeom.mjGEOM_BOX
    spec = mujoco.MjSpec()
    spec.modelname = "so101"
    spec.compiler.degree = False  # every angle here is in radians
    spec.option.timestep = 0.002
    spec.option.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    spec.option.cone = mujoco.mjtCone.mjCONE_ELLIPTIC
    spec.option.gravity = [0.0, 0.0, -9.81]
    spec.stat.center = [0.15, 0.0, 0.1]
    spec.stat.extent = 0.5
    world = spec.worldbody
    world.add_light(name="top", pos=[0.2, 0.0, 1.2], dir=[0.0, 0.0, -1.0], diffuse=[0.7, 0.7, 0.7],
                    castshadow=False)
    # Contacts: the cube (contype 1, conaffinity 1) touches the table and the jaw pads (contype 1,
    # conaffinity 0); the table and the pads never touch each other; every other shape is visual.
    world.add_geom(name="table", type=BOX, size=TABLE_HALF_SIZE, pos=TABLE_CENTER, rgba=[0.55, 0.45, 0.35, 1.0],
                   contype=1, conaffinity=0, **_GRIP_CONTACT)

    base = world.add_body(name="base", pos=BASE_POS, quat=BASE_QUAT)
    _add_inertial(base, "base")
    pan_xyz = _JOINT_ORIGINS["shoulder_pan"][2]
    _visual(base, BOX, [0.045, 0.05, 0.0325], pos=[pan_xyz[0], 0.0, 0.0325])  # the foot
    _visual(base, BOX, [0.0125, 0.0226, 0.0175], pos=[pan_xyz[0], pan_xyz[1] + 0.01, 0.0775], rgba=_SERVO)

    bodies = {"base": base}
    for joint in JOINTS:
        parent, child, xyz, rpy = _JOINT_ORIGINS[joint]
        body = bodies[parent].add_body(name=child, pos=xyz, quat=rpy_to_quat(rpy))
        bodies[child] = body
        _add_inertial(body, child)
        lo, hi = LIMITS[joint]
        body.add_joint(name=joint, type=mujoco.mjtJoint.mjJNT_HINGE, axis=[0.0, 0.0, 1.0], range=[lo, hi],
                       limited=mujoco.mjtLimited.mjLIMITED_TRUE, armature=SERVO_ARMATURE, damping=JOINT_DAMPING)

    # link shapes: each follows its link from its joint to the next one (URDF link frames)
    lift = _JOINT_ORIGINS["shoulder_lift"][2]
    _visual(bodies["shoulder"], CAP, [0.02], fromto=[0.0, 0.0, -0.005, lift[0], 0.0, lift[2]])
    _visual(bodies["shoulder"], BOX, [0.0226, 0.0125, 0.0175], pos=[lift[0], 0.0, -0.042], rgba=_SERVO)
    elbow = _JOINT_ORIGINS["elbow_flex"][2]
    _visual(bodies["upper_arm"], CAP, [0.016], fromto=[0.0, 0.0, 0.018, elbow[0], elbow[1], 0.018])
    _visual(bodies["upper_arm"], BOX, [0.0226, 0.0125, 0.0175], pos=[elbow[0], elbow[1] + 0.0125, 0.0187],
            rgba=_SERVO)
    wflex = _JOINT_ORIGINS["wrist_flex"][2]
    _visual(bodies["lower_arm"], CAP, [0.015], fromto=[0.0, 0.0, 0.018, wflex[0], wflex[1], 0.018])
    _visual(bodies["lower_arm"], BOX, [0.0226, 0.0125, 0.0175], pos=[wflex[0] + 0.0125, wflex[1], 0.0187],
            rgba=_SERVO)
    wroll = _JOINT_ORIGINS["wrist_roll"][2]
    _visual(bodies["wrist"], CAP, [0.016], fromto=[0.0, 0.0, 0.018, wroll[0], wroll[1] + 0.01, wroll[2]])
    _visual(bodies["wrist"], BOX, [0.0125, 0.0175, 0.0226], pos=[0.0, -0.0424, 0.0306], rgba=_SERVO)

    gripper = bodies["gripper"]
    _visual(gripper, CAP, [0.018], fromto=[0.0, 0.0, 0.0, 0.0, 0.0, -0.01])  # the wrist roll follower
    _visual(gripper, BOX, [0.0226, 0.0175, 0.0124], pos=[0.0077, 0.0001, -0.0234], rgba=_SERVO)  # gripper servo
    jaw_half_z = (_JAW_TOP_Z - _JAW_TIP_Z) / 2
    gripper.add_geom(name="fixed_jaw", type=BOX, size=[_JAW_THICK / 2, _JAW_WIDTH / 2, jaw_half_z],
                     pos=[_JAW_FACE_X - _JAW_THICK / 2, 0.0, _JAW_TIP_Z + jaw_half_z], rgba=_PRINTED,
                     contype=1, conaffinity=0, **_GRIP_CONTACT)
    gripper.add_site(name="tcp", pos=TCP_XYZ, quat=rpy_to_quat(TCP_RPY), size=[0.004], rgba=[0.0, 0.8, 0.0, 0.5],
                     group=3)  # group 3: hidden in renders by default

    jaw = bodies["moving_jaw"]
    centre, quat, half, _ = _moving_pad()
    jaw.add_geom(name="moving_jaw_pad", type=BOX, size=half, pos=centre, quat=quat, rgba=_PRINTED,
                 contype=1, conaffinity=0, **_GRIP_CONTACT)
    top = centre + rotz(2 * math.atan2(quat[3], quat[0])) @ np.array([half[0], half[1], 0.0])
    _visual(jaw, CAP, [0.005], fromto=[0.0, 0.0, centre[2], top[0], top[1], centre[2]])  # pivot to pad

    for joint in JOINTS:
        lo, hi = LIMITS[joint]
        act = spec.add_actuator(name=joint, target=joint, trntype=mujoco.mjtTrn.mjTRN_JOINT)
        act.set_to_position(kp=SERVO_KP, kv=SERVO_KV)
        act.ctrlrange = [lo, hi]
        act.ctrllimited = mujoco.mjtLimited.mjLIMITED_TRUE
        act.forcerange = [-SERVO_STALL_TORQUE_NM, SERVO_STALL_TORQUE_NM]
        act.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE

    if cube:
        body = world.add_body(name="cube", pos=CUBE_POS)
        body.add_freejoint(name="cube")
        body.add_geom(name="cube", type=BOX, size=[CUBE_SIZE / 2] * 3, mass=CUBE_MASS, rgba=[0.85, 0.1, 0.1, 1.0],
                      contype=1, conaffinity=1, **_GRIP_CONTACT)
    if cameras:
        pos, target = (0.62, -0.42, 0.42), (0.12, 0.0, 0.1)
        world.add_camera(name="front", pos=pos, quat=look_at_quat(pos, target), fovy=45.0)
        # on link gripper beside the jaws, looking down the fingers at the space between the pads
        pos, target = (0.0, 0.04, -0.045), (_JAW_FACE_X + CUBE_SIZE / 2, 0.0, -0.115)
        gripper.add_camera(name="wrist", pos=pos, quat=look_at_quat(pos, target, up=(1.0, 0.0, 0.0)), fovy=75.0)
        # level with the lift line, beside the cube's region: how high the cube is (the classifier's)
        pos, target = (0.19, -0.42, 0.05), (0.19, 0.0, 0.05)
        world.add_camera(name="side", pos=pos, quat=look_at_quat(pos, target), fovy=40.0)
    return spec


def gripper_width(gripper: float) -> float:
    """The gap (m) between the fixed jaw's face and the moving pad's tip at this gripper angle:
    0 when closed (at 0 rad and below), CUBE_SIZE where a 2.5 cm cube stops the jaw."""
    pivot = np.array(_JOINT_ORIGINS["gripper"][2])
    px = _JAW_FACE_X - pivot[0]
    py = -math.sqrt((pivot[2] - _JAW_TIP_Z) ** 2 - px ** 2)
    q = float(gripper)
    return max(0.0, px * math.cos(q) - py * math.sin(q) - px)
