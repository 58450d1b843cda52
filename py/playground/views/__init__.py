"""One module per view. Each builds its Bokeh figures once and patches their sources when the state changes."""
