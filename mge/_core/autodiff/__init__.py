"""Autodiff rules: the backward rule of every op, as tables by op family (``rules/``).

``registry.py`` holds the tables (``BACKWARD``, ``KEEPS_OUTPUTS``) and ``def_backward``;
``gradutil.py`` the helpers the rules compute with.  The grad transformation
(``plugins/grad.py``) calls the rules; they run their ops through the layer below it.
"""
