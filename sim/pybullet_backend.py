"""PyBullet backend of the twin: the same Panda URDF, work cell and Cartesian impedance
controller as ``mujoco_backend``, stepped at 500 Hz in a private DIRECT client (several
envs can coexist in one process)."""

from __future__ import annotations

import numpy as np
import pybullet as pb

from robot_rl.sim import panda_description as panda
from robot_rl.sim.controller import PHYSICS_DT, CartesianImpedance, ImpedanceGains
from robot_rl.sim.tasks import Layout, SceneObject, Task
from robot_rl.errors import InputError

GRIPPER_FORCE = 30.0  # N per finger, like the MuJoCo gripper's force range
FINGER_FRICTION = 1.5
WELD_FORCE = 200.0  # N, strength of the weld on a held object
SOLVER_ITERATIONS = 20  # pybullet defaults to 50; 20 holds the grasps as well and is ~30% faster with contacts
_PARK = (5.0, 0.0, 1.0)  # objects wait here (spaced out in y), far from robot and table, between episodes


def _xyzw(wxyz) -> list[float]:
    w, x, y, z = wxyz
    return [x, y, z, w]


def _wxyz(xyzw) -> np.ndarray:
    x, y, z, w = xyzw
    return np.array([w, x, y, z])


class PybulletBackend:
    name = "pybullet"
    weld_held_object = True  # False: the held object stays in the hand by finger friction only

    def __init__(self, task: Task, gains: ImpedanceGains = ImpedanceGains()):
        self.task = task
        self._cid = cid = pb.connect(pb.DIRECT)
        pb.setTimeStep(PHYSICS_DT, physicsClientId=cid)
        pb.setGravity(0.0, 0.0, -9.81, physicsClientId=cid)
        pb.setRealTimeSimulation(0, physicsClientId=cid)
        pb.setPhysicsEngineParameter(deterministicOverlappingPairs=1, numSolverIterations=SOLVER_ITERATIONS,
                                     physicsClientId=cid)

        # The table: a plane collision shape with its top at z = 0, drawn as a thin slab.
        table_vis = pb.createVisualShape(pb.GEOM_BOX, halfExtents=[1.0, 1.0, 0.005], visualFramePosition=[0, 0, -0.005],
                                         rgbaColor=[0.55, 0.45, 0.35, 1.0], physicsClientId=cid)
        table_col = pb.createCollisionShape(pb.GEOM_PLANE, physicsClientId=cid)
        pb.createMultiBody(0.0, table_col, table_vis, physicsClientId=cid)

        # Robot: self-collision off; the URDF's own inertias, like the MuJoCo model.
        self.robot = r = pb.loadURDF(panda.urdf_path(), [0, 0, 0], useFixedBase=True,
                                     flags=pb.URDF_USE_INERTIA_FROM_FILE, physicsClientId=cid)
        joints = {pb.getJointInfo(r, j, physicsClientId=cid)[1].decode(): j
                  for j in range(pb.getNumJoints(r, physicsClientId=cid))}
        links = {pb.getJointInfo(r, j, physicsClientId=cid)[12].decode(): j for j in joints.values()}
        self._arm = [joints[n] for n in panda.ARM_JOINTS]
        self._fingers = [joints[n] for n in panda.FINGER_JOINTS]
        self._dofs = self._arm + self._fingers  # every movable joint, in pybullet's dof order
        assert self._dofs == sorted(self._dofs) and len(self._dofs) == 9
        self._hand = links[panda.HAND_LINK]
        self._tcp = links["panda_grasptarget"]  # fixed link at TCP_OFFSET_IN_HAND on the hand's z
        self._hand_links = {self._hand, *(links[n] for n in panda.FINGER_LINKS)}
        for link in range(-1, pb.getNumJoints(r, physicsClientId=cid)):
            pb.changeDynamics(r, link, linearDamping=0.0, angularDamping=0.0, physicsClientId=cid)
        for j in self._arm:
            pb.changeDynamics(r, j, jointDamping=0.5, physicsClientId=cid)
        for j in self._fingers:
            pb.changeDynamics(r, j, lateralFriction=FINGER_FRICTION, jointDamping=5.0, physicsClientId=cid)
            pb.changeVisualShape(r, j, rgbaColor=[0.3, 0.3, 0.3, 1.0], physicsClientId=cid)  # as in MuJoCo
        # The URDF's <mimic>: a gear keeps the fingers symmetric (pybullet ignores mimic tags).
        gear = pb.createConstraint(r, self._fingers[0], r, self._fingers[1], pb.JOINT_GEAR, [1, 0, 0], [0, 0, 0],
                                   [0, 0, 0], physicsClientId=cid)
        pb.changeConstraint(gear, gearRatio=-1, erp=0.1, maxForce=100, physicsClientId=cid)
        # Torque control: switch off the default velocity motors of the arm joints.
        pb.setJointMotorControlArray(r, self._arm, pb.VELOCITY_CONTROL, forces=[0.0] * 7, physicsClientId=cid)

        self._objects = {obj.name: self._add_object(obj, i) for i, obj in enumerate(task.objects)}
        self._state_id = pb.saveState(physicsClientId=cid)  # the pristine state every reset restores

        self.controller = CartesianImpedance(panda.ARM_EFFORT_LIMITS, gains)
        self._q_rest = np.asarray(task.home_joints, dtype=np.float64)
        self._zeros = [0.0] * len(self._dofs)
        self._weld: int | None = None  # constraint holding ``layout.held_object`` in the hand
        self._held: int | None = None  # that object's body
        self._contact_log: list[tuple] = []  # end-effector contacts of the last control period
        self._logged_steps = 1

    def _add_object(self, obj: SceneObject, index: int) -> int:
        """One multibody per object with a compound box shape (fixed when ``mass`` is None)."""
        cid, n = self._cid, len(obj.geoms)
        halves = [list(g.half_size) for g in obj.geoms]
        frames = [list(g.local_pos) for g in obj.geoms]
        col = -1  # a marking the cameras see and nothing touches
        if obj.collides:
            col = pb.createCollisionShapeArray([pb.GEOM_BOX] * n, halfExtents=halves, collisionFramePositions=frames,
                                               physicsClientId=cid)
        vis = pb.createVisualShapeArray([pb.GEOM_BOX] * n, halfExtents=halves, visualFramePositions=frames,
                                        physicsClientId=cid)
        park = [_PARK[0], _PARK[1] + index, _PARK[2]]
        body = pb.createMultiBody(obj.mass or 0.0, col, vis, basePosition=park, physicsClientId=cid)
        pb.changeVisualShape(body, -1, rgbaColor=list(obj.rgba), physicsClientId=cid)
        pb.changeDynamics(body, -1, lateralFriction=obj.friction, spinningFriction=0.001,
                          linearDamping=0.0, angularDamping=0.0, physicsClientId=cid)
        return body

    # ---- episode set-up -------------------------------------------------------------
    def reset(self, layout: Layout) -> None:
        cid, r = self._cid, self.robot
        if self._weld is not None:
            pb.removeConstraint(self._weld, physicsClientId=cid)
            self._weld = self._held = None
        pb.restoreState(self._state_id, physicsClientId=cid)
        self._contact_log = []
        # Objects are parked again: a collision pass drops the last episode's contact points,
        # which would otherwise warm-start the solver (and break reset determinism).
        pb.performCollisionDetection(physicsClientId=cid)
        for j, q in zip(self._arm, self.task.home_joints):
            pb.resetJointState(r, j, q, 0.0, physicsClientId=cid)
        half = layout.gripper_width / 2
        for j in self._fingers:
            pb.resetJointState(r, j, half, 0.0, physicsClientId=cid)
        self._set_gripper(half if layout.held_object is None else 0.0)
        for name, (pos, quat) in layout.object_poses.items():
            body = self._objects[name]
            pb.resetBasePositionAndOrientation(body, list(pos), _xyzw(quat), physicsClientId=cid)
            pb.resetBaseVelocity(body, [0.0] * 3, [0.0] * 3, physicsClientId=cid)
        if layout.held_object is not None and self.weld_held_object:
            self._hold(layout.held_object)

    def _hold(self, name: str) -> None:
        """Weld ``name`` to the hand at their current relative pose, as the MuJoCo backend
        does: a two-finger friction grasp lets the peg pivot about the finger axis when it
        catches the hole's rim. Constraint frames are relative to the links' centres of mass."""
        cid, body = self._cid, self._objects[name]
        hand_com = self._link(self._hand)[:2]
        rel_pos, rel_orn = pb.multiplyTransforms(*pb.invertTransform(*hand_com),
                                                 *pb.getBasePositionAndOrientation(body, physicsClientId=cid))
        self._weld = pb.createConstraint(self.robot, self._hand, body, -1, pb.JOINT_FIXED, [0, 0, 0], rel_pos,
                                         [0, 0, 0], rel_orn, physicsClientId=cid)
        pb.changeConstraint(self._weld, maxForce=WELD_FORCE, physicsClientId=cid)
        self._held = body

    def _set_gripper(self, half_width: float) -> None:
        pb.setJointMotorControlArray(self.robot, self._fingers, pb.POSITION_CONTROL, targetPositions=[half_width] * 2,
                                     forces=[GRIPPER_FORCE] * 2, physicsClientId=self._cid)

    # ---- control ----------------------------------------------------------------------
    def step(self, target_pos, target_rot, gripper_width_target, n_substeps: int,
             track_peak_wrench: bool = False) -> np.ndarray | None:
        """One control period. ``track_peak_wrench``: also return the magnitude of the external
        wrench per axis (x y z force, x y z torque) that a collision reflex compares: here the
        period's mean (``wrench``), as PyBullet's rigid contacts chatter from one 2 ms step to the
        next and a single step's reading is no measure of the force."""
        cid, r, arm = self._cid, self.robot, self._arm
        self._set_gripper(float(np.clip(gripper_width_target / 2, 0.0, 0.04)))
        target_pos, target_rot = np.asarray(target_pos, float), np.asarray(target_rot, float)
        torques = self.controller.torques
        self.controller.update_nullspace(self._kinematics()[2], self._q_rest)
        log: list[tuple] = []
        for _ in range(n_substeps):
            q, qvel, jac = self._kinematics()
            link = pb.getLinkState(r, self._tcp, computeForwardKinematics=1, physicsClientId=cid)
            rot = np.array(pb.getMatrixFromQuaternion(link[5])).reshape(3, 3)
            gravity = pb.calculateInverseDynamics(r, q, self._zeros, self._zeros, physicsClientId=cid)[:7]
            tau = torques(jac, np.array(q[:7]), qvel, np.array(link[4]), rot, target_pos, target_rot) + gravity
            pb.setJointMotorControlArray(r, arm, pb.TORQUE_CONTROL, forces=tau.tolist(), physicsClientId=cid)
            pb.stepSimulation(physicsClientId=cid)
            log += self._hand_contacts()
        self._contact_log, self._logged_steps = log, n_substeps
        if not track_peak_wrench:
            return None
        force, torque = self.wrench()
        return np.abs(np.concatenate([force, torque]))

    def _kinematics(self) -> tuple[list[float], np.ndarray, np.ndarray]:
        """Positions of all 9 dofs, arm joint velocities, and the 6 x 7 arm Jacobian at the TCP."""
        cid, r, zeros = self._cid, self.robot, self._zeros
        states = pb.getJointStates(r, self._dofs, physicsClientId=cid)
        q = [s[0] for s in states]
        lin, ang = pb.calculateJacobian(r, self._tcp, [0.0, 0.0, 0.0], q, zeros, zeros, physicsClientId=cid)
        return q, np.array([s[1] for s in states[:7]]), np.array(lin + ang)[:, :7]

    # ---- measurements -----------------------------------------------------------------
    def _link(self, link: int, velocity: bool = False):
        return pb.getLinkState(self.robot, link, computeLinkVelocity=int(velocity), computeForwardKinematics=1,
                               physicsClientId=self._cid)

    def tcp_pose(self) -> tuple[np.ndarray, np.ndarray]:
        link = self._link(self._tcp)
        return np.array(link[4]), np.array(pb.getMatrixFromQuaternion(link[5])).reshape(3, 3)

    def tcp_velocity(self) -> tuple[np.ndarray, np.ndarray]:
        link = self._link(self._tcp, velocity=True)
        return np.array(link[6]), np.array(link[7])  # linear, angular (world frame)

    def gripper_width(self) -> float:
        states = pb.getJointStates(self.robot, self._fingers, physicsClientId=self._cid)
        return float(states[0][0] + states[1][0])

    def _hand_contacts(self) -> list[tuple]:
        """The last physics step's contact points on the end effector: hand and finger links,
        plus a welded held object (counted as part of the hand) touching anything else."""
        cid, held = self._cid, self._held
        points = [c for c in pb.getContactPoints(bodyA=self.robot, physicsClientId=cid)
                  if c[3] in self._hand_links and c[2] != held]
        if held is not None:
            points += [c for c in pb.getContactPoints(bodyA=held, physicsClientId=cid) if c[2] != self.robot]
        return points

    def wrench(self) -> tuple[np.ndarray, np.ndarray]:
        """External force/torque on the hand (base frame, torque about the TCP) from contacts,
        not a joint sensor: the contact forces (normal + both friction directions) on the
        hand and finger links, averaged over the last control period's physics steps (rigid
        contacts chatter from one 2 ms step to the next). A welded held object counts as part
        of the hand, with its weight, like the MuJoCo wrist F/T reading. Exactly zero in free
        space, +z when pressing down on something, zero right after reset; unlike a wrist
        F/T sensor it has no inertial part."""
        cid, held = self._cid, self._held
        tcp = np.array(self._link(self._tcp)[4])
        force, torque = np.zeros(3), np.zeros(3)
        if self._contact_log:
            # c[5]: point on A, c[7]: normal on B (towards A), c[9]: normal force, c[10:14]: friction
            c = np.array([(*c[5], *c[7], c[9], *c[11], c[10], *c[13], c[12]) for c in self._contact_log])
            f = c[:, 6:7] * c[:, 3:6] + c[:, 10:11] * c[:, 7:10] + c[:, 14:15] * c[:, 11:14]
            force += f.sum(axis=0) / self._logged_steps
            torque += np.cross(c[:, :3] - tcp, f).sum(axis=0) / self._logged_steps
        if held is not None:
            weight = np.array([0.0, 0.0, -9.81 * pb.getDynamicsInfo(held, -1, physicsClientId=cid)[0]])
            force += weight
            torque += np.cross(np.array(pb.getBasePositionAndOrientation(held, physicsClientId=cid)[0]) - tcp, weight)
        return force, torque

    def object_poses(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        out = {}
        for name, body in self._objects.items():
            pos, quat = pb.getBasePositionAndOrientation(body, physicsClientId=self._cid)
            out[name] = (np.array(pos), _wxyz(quat))
        return out

    def render(self, camera: str, height: int, width: int) -> np.ndarray:
        cid = self._cid
        if camera == "front":
            eye, target, up, fov = panda.FRONT_CAMERA_POS, panda.FRONT_CAMERA_TARGET, (0.0, 0.0, 1.0), panda.FRONT_CAMERA_FOVY
        elif camera == "wrist":
            link = self._link(self._hand)
            pos, rot = np.array(link[4]), np.array(pb.getMatrixFromQuaternion(link[5])).reshape(3, 3)
            eye = pos + rot @ np.asarray(panda.WRIST_CAMERA_POS)
            target = pos + rot @ np.asarray(panda.WRIST_CAMERA_TARGET)
            up, fov = rot[:, 0], panda.WRIST_CAMERA_FOVY
        elif camera == "side":
            eye, target, up, fov = panda.SIDE_CAMERA_POS, panda.SIDE_CAMERA_TARGET, (0.0, 0.0, 1.0), panda.SIDE_CAMERA_FOVY
        else:
            raise InputError(f"unknown camera {camera!r}; the twin has 'front', 'wrist' and 'side'")
        view = pb.computeViewMatrix(list(eye), list(target), list(up), physicsClientId=cid)
        proj = pb.computeProjectionMatrixFOV(fov, width / height, 0.01, 5.0, physicsClientId=cid)
        img = pb.getCameraImage(width, height, view, proj, renderer=pb.ER_TINY_RENDERER,
                                flags=pb.ER_NO_SEGMENTATION_MASK, physicsClientId=cid)[2]
        return np.asarray(img, dtype=np.uint8).reshape(height, width, 4)[:, :, :3].copy()

    def close(self) -> None:
        if self._cid is not None and pb.isConnected(self._cid):
            pb.disconnect(self._cid)
        self._cid = None
