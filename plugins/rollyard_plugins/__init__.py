"""The standard plugins shipped with rollyard, registered through the ``rollyard`` entry-point
group exactly like third-party plugins."""
