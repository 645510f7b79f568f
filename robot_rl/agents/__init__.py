"""Agents: SAC with the RLPD recipe (sac.py), networks and encoders."""
